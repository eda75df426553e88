package e2e

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/fluxcd/pkg/runtime/conditions"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// TestCommitsAreSignedWithTheRepositoryKey: with spec.commit.signingKeyRef,
// every commit rollgate pushes (the status branch, the approval branch) is
// signed with that key; with a key that cannot be used, rollgate pushes
// nothing and the Repository says why, without quoting the key.
func TestCommitsAreSignedWithTheRepositoryKey(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.ensureNamespace("demo")
	private, public := signingKey(t)
	for name, key := range map[string][]byte{"signing-key": private, "broken-key": []byte("-----BEGIN PGP PRIVATE KEY BLOCK-----\nnot a key\n")} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name}, Data: map[string][]byte{"git.asc": key}}
		if err := w.c.Create(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	w.givenAppFromGit(echoRollout, "commit: {signingKeyRef: {name: signing-key}}")

	// When a release reaches its gate, the approval branch and the status
	// branch that shows the gate are signed by the Repository's key.
	w.applyYAML(echoApp("echo:2.0"))
	var ro *v1alpha1.Rollout
	w.eventually(90*time.Second, "step 1 waiting for approval, in Git", func(ctx context.Context) (bool, error) {
		ro = w.rollout("demo", "echoserver")
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
	statusHead := headCommit(t, bare, gitsync.DefaultStatusBranch).Hash
	r := w.repository("demo", "app-repo")
	r.Spec.Commit.SigningKeyRef.Name = "broken-key"
	if err := w.c.Update(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	w.eventually(30*time.Second, "the Repository not Ready, naming the signing key", func(ctx context.Context) (bool, error) {
		c := conditions.Get(w.repository("demo", "app-repo"), v1alpha1.ReadyCondition)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "spec.commit.signingKeyRef"), nil
	})
	msg := conditions.GetMessage(w.repository("demo", "app-repo"), v1alpha1.ReadyCondition)
	if strings.Contains(msg, "not a key") || strings.Contains(msg, "BEGIN PGP") {
		t.Fatalf("the Repository's status quotes the key: %q", msg)
	}
	// The release goes on in the cluster (approve it there); Git gets no
	// unsigned commit meanwhile.
	ro = w.rollout("demo", "echoserver")
	ro.Spec.Approvals = append(ro.Spec.Approvals, v1alpha1.Approval{Revision: ro.Status.CanaryRevision, Step: 1})
	if err := w.c.Update(context.Background(), ro); err != nil {
		t.Fatal(err)
	}
	w.eventually(60*time.Second, "step 1 approved", func(ctx context.Context) (bool, error) {
		return w.rollout("demo", "echoserver").Status.CurrentStepIndex >= 2, nil
	})
	w.eventually(30*time.Second, "GitSynced=False naming the key", func(ctx context.Context) (bool, error) {
		c := conditions.Get(w.rollout("demo", "echoserver"), v1alpha1.GitSyncedCondition)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "signingKeyRef"), nil
	})
	// Three status windows: nothing may be written meanwhile.
	w.holds(3*time.Second, "the status branch with an unusable signing key", func(ctx context.Context) error {
		if h := headCommit(t, bare, gitsync.DefaultStatusBranch).Hash; h != statusHead {
			return fmt.Errorf("rollgate pushed %s to the status branch with an unusable signing key", h)
		}
		return nil
	})
}

// signingKey returns a new OpenPGP key pair, armored.
func signingKey(t *testing.T) (private []byte, public string) {
	t.Helper()
	e, err := openpgp.NewEntity("rollgate e2e", "", "rollgate-e2e@rollgate.invalid", nil)
	if err != nil {
		t.Fatal(err)
	}
	var priv, pub bytes.Buffer
	wp, err := armor.Encode(&priv, openpgp.PrivateKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SerializePrivate(wp, nil); err != nil {
		t.Fatal(err)
	}
	wp.Close()
	wb, err := armor.Encode(&pub, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Serialize(wb); err != nil {
		t.Fatal(err)
	}
	wb.Close()
	return priv.Bytes(), pub.String()
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
