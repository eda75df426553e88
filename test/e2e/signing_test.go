package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

// TestCommitsAreSignedWithTheRepositoryKey: with spec.commit.signingKeyRef,
// every commit rollgate pushes (the status branch, the approval branch) is
// signed with that key; with a key that cannot be used, rollgate pushes
// nothing and the Repository says why, without quoting the key.
func TestCommitsAreSignedWithTheRepositoryKey(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	private, public := gitserver.OpenPGPKeyPair(t, "rollgate-e2e")
	for name, key := range map[string][]byte{"signing-key": private, "broken-key": []byte("-----BEGIN PGP PRIVATE KEY BLOCK-----\nnot a key\n")} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: name}, Data: map[string][]byte{"git.asc": key}}
		if err := w.C.Create(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	w.givenAppFromGit(echoRollout, "commit: {signingKeyRef: {name: signing-key}}")

	// When a release reaches its gate, the approval branch and the status
	// branch that shows the gate are signed by the Repository's key.
	w.ApplyYAML(echoApp("echo:2.0"))
	var ro *v1alpha1.Rollout
	w.Eventually(90*time.Second, "step 1 waiting for approval, in Git", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		return ro.Status.AwaitingApproval != nil && ro.Status.AwaitingApproval.Branch != "" &&
			conditions.IsTrue(ro, v1alpha1.GitSyncedCondition), nil
	})
	bare := filepath.Join(w.git.Root, "app.git")
	for _, branch := range []string{ro.Status.AwaitingApproval.Branch, gitsync.DefaultStatusBranch} {
		c := headCommit(t, bare, branch)
		if c.PGPSignature == "" {
			t.Fatalf("the head of %s (%s %q) is not signed", branch, c.Hash, c.Message)
		}
		if _, err := c.Verify(public); err != nil {
			t.Fatalf("the head of %s is not signed by the Repository's key: %v", branch, err)
		}
	}

	// When the key cannot be used, nothing more is pushed, and the
	// Repository and the Rollout say why.
	r := w.repository(w.NS, "app-repo")
	w.Update(r, func() { r.Spec.Commit.SigningKeyRef.Name = "broken-key" })
	w.Eventually(30*time.Second, "the Repository not Ready, naming the signing key", func(ctx context.Context) (bool, error) {
		c := conditions.Get(w.repository(w.NS, "app-repo"), v1alpha1.ReadyCondition)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "spec.commit.signingKeyRef"), nil
	})
	// A state the writer held before it saw the change may still have been
	// written, with the good key; from here on nothing may be.
	statusHead := headCommit(t, bare, gitsync.DefaultStatusBranch)
	if _, err := statusHead.Verify(public); err != nil {
		t.Fatalf("the head of the status branch when the key changed (%s) is not signed by the Repository's key: %v", statusHead.Hash, err)
	}
	msg := conditions.GetMessage(w.repository(w.NS, "app-repo"), v1alpha1.ReadyCondition)
	if strings.Contains(msg, "not a key") || strings.Contains(msg, "BEGIN PGP") {
		t.Fatalf("the Repository's status quotes the key: %q", msg)
	}
	// The release goes on in the cluster (approve it there); Git gets no
	// unsigned commit meanwhile.
	ro = w.Rollout(w.NS, "echoserver")
	w.Update(ro, func() {
		ro.Spec.Approvals = append(ro.Spec.Approvals, v1alpha1.Approval{Revision: ro.Status.CanaryRevision, Step: 1})
	})
	w.Eventually(60*time.Second, "step 1 approved", func(ctx context.Context) (bool, error) {
		return w.Rollout(w.NS, "echoserver").Status.CurrentStepIndex >= 2, nil
	})
	w.Eventually(30*time.Second, "GitSynced=False naming the key", func(ctx context.Context) (bool, error) {
		c := conditions.Get(w.Rollout(w.NS, "echoserver"), v1alpha1.GitSyncedCondition)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "signingKeyRef"), nil
	})
	// Three status windows: nothing may be written meanwhile.
	w.Holds(3*time.Second, "the status branch with an unusable signing key", func(ctx context.Context) error {
		if h := headCommit(t, bare, gitsync.DefaultStatusBranch).Hash; h != statusHead.Hash {
			return fmt.Errorf("rollgate pushed %s to the status branch with an unusable signing key", h)
		}
		return nil
	})
}

// headCommit reads the head commit of branch in the server's bare repository.
func headCommit(t *testing.T, bare, branch string) *object.Commit {
	t.Helper()
	r, err := git.PlainOpen(bare)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := r.Reference(plumbing.NewBranchReferenceName(branch), true)
	if err != nil {
		t.Fatalf("branch %s: %v", branch, err)
	}
	c, err := r.CommitObject(ref.Hash())
	if err != nil {
		t.Fatal(err)
	}
	return c
}
