package gitsource

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/internal/rollouttest"
	"github.com/rollgate/rollgate/test/gitserver"
)

// countingReader counts the reads that reach the API server, by kind.
type countingReader struct {
	client.Reader
	mu   sync.Mutex
	gets map[string]int
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	kind := "other"
	switch obj.(type) {
	case *corev1.Secret:
		kind = "Secret"
	case *v1alpha1.Repository:
		kind = "Repository"
	}
	r.mu.Lock()
	r.gets[kind]++
	r.mu.Unlock()
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r *countingReader) count(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gets[kind]
}

// TestForRolloutReadsSecretsWhereTheyDecide: a Rollout's reconcile reads
// its Repository from the cache, and the Repository's Secrets only when
// they may have changed what is open: after SecretsRecheck, after a change
// of the Repository's spec, and at every reconcile that judges an approval
// gate, so a revoked key counts at once where it decides and within
// SecretsRecheck elsewhere.
func TestForRolloutReadsSecretsWhereTheyDecide(t *testing.T) {
	ctx, _, c, _ := rollouttest.StartAPIServer(t)
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"README.md": "app\n"})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "reuse"
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	for _, name := range []string{"key-a", "key-b"} {
		key, _ := gitserver.OpenPGPKeyPair(t, name)
		rollouttest.MustCreate(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{signingKeyKey: key}})
	}
	repo := &v1alpha1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-repo"},
		Spec: v1alpha1.RepositorySpec{URL: url, Branch: "main",
			Status: v1alpha1.StatusWriteSpec{Window: &metav1.Duration{Duration: time.Hour}},
			Commit: v1alpha1.CommitSpec{SigningKeyRef: &v1alpha1.LocalObjectReference{Name: "key-a"}}}}
	rollouttest.MustCreate(t, c, repo)

	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	live := &countingReader{Reader: c, gets: map[string]int{}}
	g := NewPool(live, Options{InsecureHTTP: true, Now: func() time.Time { return now }})
	g.cached = c // stands for the manager's cache: reads that do not reach live
	go func() { _ = g.Start(ctx) }()
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: v1alpha1.RolloutSpec{Git: &v1alpha1.GitReference{Repository: repo.Name}}}
	open := func(step string) *Repo {
		t.Helper()
		e, _, err := g.ForRollout(ctx, ro)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return e
	}
	wantSecretReads := func(step string, want int) {
		t.Helper()
		if got := live.count("Secret"); got != want {
			t.Fatalf("%s: %d Secret reads so far, want %d", step, got, want)
		}
	}

	// A release in motion: the first reconcile opens the repository, the
	// next ones within SecretsRecheck read nothing live.
	first := open("first reconcile")
	wantSecretReads("first reconcile", 1)
	for i := 0; i < 5; i++ {
		now = now.Add(SecretsRecheck / 10)
		if e := open("reconcile in motion"); e != first {
			t.Fatal("a reconcile in motion opened the repository again")
		}
	}
	wantSecretReads("five reconciles in motion", 1)
	if n := live.count("Repository"); n != 0 {
		t.Fatalf("%d Repository reads reached the API server; want them from the cache", n)
	}

	// After SecretsRecheck, the next reconcile reads them again (and keeps
	// the repository: nothing changed).
	now = now.Add(SecretsRecheck)
	if e := open("after SecretsRecheck"); e != first {
		t.Fatal("an unchanged Secret reopened the repository")
	}
	wantSecretReads("after SecretsRecheck", 2)

	// A gate that waits reads them at every reconcile.
	ro.Status.AwaitingApproval = &v1alpha1.ApprovalRequest{Revision: "abc", Step: 1}
	open("at the gate")
	open("at the gate again")
	wantSecretReads("two reconciles at the gate", 4)

	ro.Status.AwaitingApproval = nil
	// A change of the Repository's spec is seen at the next reconcile in
	// motion, without waiting for SecretsRecheck.
	if err := c.Get(ctx, client.ObjectKeyFromObject(repo), repo); err != nil {
		t.Fatal(err)
	}
	repo.Spec.Commit.SigningKeyRef.Name = "key-b"
	if err := c.Update(ctx, repo); err != nil {
		t.Fatal(err)
	}
	second := open("after the spec changed")
	if second == first {
		t.Fatal("the repository opened with the former spec was used after the spec changed")
	}
	reads := live.count("Secret")
	open("in motion after the change")
	wantSecretReads("a reconcile in motion right after reopening", reads)

	// A revoked key counts within SecretsRecheck in motion (the stated
	// bound), and at once at the gate.
	if err := c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "key-b"}}); err != nil {
		t.Fatal(err)
	}
	open("in motion right after the key's Secret was deleted")
	ro.Status.AwaitingApproval = &v1alpha1.ApprovalRequest{Revision: "abc", Step: 1}
	if _, _, err := g.ForRollout(ctx, ro); err == nil || !strings.Contains(err.Error(), "spec.commit.signingKeyRef") {
		t.Fatalf("a reconcile at the gate after the key's Secret was deleted: %v; want an error naming spec.commit.signingKeyRef", err)
	}
}
