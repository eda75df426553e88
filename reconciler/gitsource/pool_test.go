package gitsource

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/reconciler/internal/rollouttest"
	"github.com/rollgate/rollgate/test/gitserver"
)

// TestAnUnusableSigningKeyStopsTheWriter: when a Repository's
// signingKeyRef is changed to a key that cannot be used, the repository
// opened with the former key writes nothing more (not even what it held
// before the change), and once a usable key is set the states it held
// are written, signed with that key. A key the user replaced is never
// used again.
func TestAnUnusableSigningKeyStopsTheWriter(t *testing.T) {
	ctx, _, c, _ := rollouttest.StartAPIServer(t)
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"README.md": "app\n"})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "signing"
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	oldKey, oldPublic := gitserver.OpenPGPKeyPair(t, "old")
	newKey, newPublic := gitserver.OpenPGPKeyPair(t, "new")
	for name, key := range map[string][]byte{"old-key": oldKey, "new-key": newKey, "broken-key": []byte("not a key")} {
		rollouttest.MustCreate(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{signingKeyKey: key}})
	}
	repo := &v1alpha1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-repo"},
		Spec: v1alpha1.RepositorySpec{URL: url, Branch: "main",
			// Nothing is flushed but by the test.
			Status: v1alpha1.StatusWriteSpec{Window: &metav1.Duration{Duration: time.Hour}},
			Commit: v1alpha1.CommitSpec{SigningKeyRef: &v1alpha1.LocalObjectReference{Name: "old-key"}}}}
	rollouttest.MustCreate(t, c, repo)
	g := NewPool(c, Options{InsecureHTTP: true})
	go func() { _ = g.Start(ctx) }()
	setKey := func(name string) (*Repo, error) {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKeyFromObject(repo), repo); err != nil {
			t.Fatal(err)
		}
		repo.Spec.Commit.SigningKeyRef.Name = name
		if err := c.Update(ctx, repo); err != nil {
			t.Fatal(err)
		}
		return g.forRepository(ctx, repo)
	}
	state := func(phase string) gitsync.RolloutState {
		return gitsync.RolloutState{Namespace: ns, Name: "web", Phase: phase}
	}
	// statusHead returns the head of the status branch and whether key
	// signed it.
	statusHead := func(key string) (string, error) {
		t.Helper()
		bare, err := git.PlainOpen(filepath.Join(srv.Root, "app.git"))
		if err != nil {
			t.Fatal(err)
		}
		ref, err := bare.Reference(plumbing.NewBranchReferenceName(gitsync.DefaultStatusBranch), true)
		if err != nil {
			t.Fatal(err)
		}
		commit, err := bare.CommitObject(ref.Hash())
		if err != nil {
			t.Fatal(err)
		}
		_, err = commit.Verify(key)
		return commit.Hash.String(), err
	}

	// Given a status commit signed with the old key, and a state held.
	e, err := g.forRepository(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	e.writer.Enqueue(state("Paused"))
	if _, err := e.writer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := statusHead(oldPublic)
	if err != nil {
		t.Fatalf("the first status commit is not signed: %v", err)
	}
	e.writer.Enqueue(state("Progressing"))

	// When the key is replaced by one that cannot be used: an error naming
	// the field, and the writer opened with the old key writes nothing.
	if _, err := setKey("broken-key"); err == nil || !strings.Contains(err.Error(), "spec.commit.signingKeyRef") || strings.Contains(err.Error(), "not a key") {
		t.Fatalf("opening with an unusable signing key: %v; want an error naming spec.commit.signingKeyRef, without the key", err)
	}
	if res, err := e.writer.Flush(ctx); err != nil || res.Commit != "" {
		t.Fatalf("the writer of the former key flushed %+v, %v; want nothing written", res, err)
	}
	if h, _ := statusHead(oldPublic); h != before {
		t.Fatalf("the status branch moved to %s with an unusable signing key", h)
	}

	// When a usable key is set, the held state is written, signed with it.
	e2, err := setKey("new-key")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e2.writer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if file, err := srv.ReadFile("app", gitsync.DefaultStatusBranch, ns+"/web.yaml"); err != nil || !containsPhase(file, "Progressing") {
		t.Fatalf("web's status file after the new key (%v):\n%s\nwant the state held while the key was unusable", err, file)
	}
	h, err := statusHead(newPublic)
	if err != nil || h == before {
		t.Fatalf("the status commit after the new key (%s) is not signed with it: %v", h, err)
	}
}

// TestAFailingStatusWriteWakesItsRollouts: a Rollout whose progress waits
// to be written is reconciled again when the status writes start to fail,
// so that its GitSynced condition names the error instead of promising a
// write within the window (a Rollout at a gate may not be reconciled
// again for hours); the later failures of the same run wake nothing, and
// the write that succeeds again wakes it through the written keys.
func TestAFailingStatusWriteWakesItsRollouts(t *testing.T) {
	ctx, _, c, _ := rollouttest.StartAPIServer(t)
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"README.md": "app\n"})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "failing"
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	repo := &v1alpha1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-repo"},
		Spec: v1alpha1.RepositorySpec{URL: url, Branch: "main",
			// Nothing is flushed but by the test.
			Status: v1alpha1.StatusWriteSpec{Window: &metav1.Duration{Duration: time.Hour}}}}
	rollouttest.MustCreate(t, c, repo)
	g := NewPool(c, Options{InsecureHTTP: true})
	go func() { _ = g.Start(ctx) }()
	e, err := g.forRepository(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	web := types.NamespacedName{Namespace: ns, Name: "web"}
	woken := func() map[types.NamespacedName]struct{} { return g.written.take() }

	e.writer.Enqueue(gitsync.RolloutState{Namespace: ns, Name: "web", Phase: "Healthy"})
	if _, err := e.writer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := woken()[web]; !ok {
		t.Fatal("a written state did not wake its Rollout")
	}

	// When the repository is gone from the server, the next flush fails
	// and wakes the Rollout whose progress waits; the one after does not.
	dir := filepath.Join(srv.Root, "app.git")
	if err := os.Rename(dir, dir+".away"); err != nil {
		t.Fatal(err)
	}
	e.writer.Enqueue(gitsync.RolloutState{Namespace: ns, Name: "web", Phase: "Progressing"})
	if _, err := e.writer.Flush(ctx); err == nil {
		t.Fatal("a flush to a repository that is gone succeeded")
	}
	if got := woken(); len(got) != 1 {
		t.Fatalf("the first failed flush woke %v, want %s", got, web)
	} else if _, ok := got[web]; !ok {
		t.Fatalf("the first failed flush woke %v, want %s", got, web)
	}
	if _, err := e.writer.Flush(ctx); err == nil {
		t.Fatal("a flush to a repository that is gone succeeded")
	}
	if got := woken(); len(got) != 0 {
		t.Fatalf("the second failed flush of a run woke %v, want nothing", got)
	}

	// When it is back, the write succeeds and wakes the Rollout.
	if err := os.Rename(dir+".away", dir); err != nil {
		t.Fatal(err)
	}
	if _, err := e.writer.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := woken()[web]; !ok {
		t.Fatal("the write after the failures did not wake the Rollout")
	}
}
