package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// TestGateOpensOnlyOnASignedMergedApproval: with spec.approvals on the
// Repository (signedBy the approvers' keys, mergeOnly), a gate holds on
// an approval written into the cluster, on an unsigned merge of the
// approval branch, on a merge signed by a key that is not an approver's,
// and while the approvers' Secret holds no usable key; each rejected
// approval is a condition and a Warning event naming the commit. A merge
// signed by an approver opens the gate.
func TestGateOpensOnlyOnASignedMergedApproval(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	approver, stranger := newPGPKey(t, "approver"), newPGPKey(t, "stranger")
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "approvers"},
		Data: map[string][]byte{"approver.asc": approver.public}}
	if err := w.C.Create(context.Background(), keys); err != nil {
		t.Fatal(err)
	}
	w.givenAppFromGit(echoRollout, "approvals: {signedBy: {name: approvers}, mergeOnly: true}")

	// Given a release waiting at the gate of step 1.
	w.ApplyYAML(echoApp("echo:2.0"))
	var ro *v1alpha1.Rollout
	w.Eventually(90*time.Second, "step 1 waiting for approval on a branch", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		return ro.Status.AwaitingApproval != nil && ro.Status.AwaitingApproval.Branch != "", nil
	})
	branch := ro.Status.AwaitingApproval.Branch

	// When someone with cluster access writes the approval into the
	// Rollout object, it does not count.
	w.Update(ro, func() {
		ro.Spec.Approvals = append(ro.Spec.Approvals, v1alpha1.Approval{Revision: ro.Status.CanaryRevision, Step: 1})
	})
	w.holdsGate(3*time.Second, 1)

	// When the approval branch is merged without a signature (main moved
	// meanwhile, so the merge is a merge commit), the gate holds, and the
	// Rollout names the merge commit and why it does not count.
	if _, err := w.git.Commit("app", "main", "unrelated change", map[string]string{"README.md": "app\n"}); err != nil {
		t.Fatal(err)
	}
	merge, err := w.git.Merge("app", "main", branch, "Merge approval of echoserver step 1")
	if err != nil {
		t.Fatal(err)
	}
	w.rejected(merge, "not signed")
	w.holdsGate(3*time.Second, 1)

	// When the merge is signed by a key that is not an approver's, the gate
	// still holds.
	if merge, err = w.git.SignTip("app", "main", stranger.sign); err != nil {
		t.Fatal(err)
	}
	w.rejected(merge, "not trusted")
	w.holdsGate(3*time.Second, 1)

	// When the approvers' Secret holds no usable key, no approval from Git
	// counts, and the Rollout names the field.
	keys.Data = map[string][]byte{"approver.asc": []byte("not a key")}
	if err := w.C.Update(context.Background(), keys); err != nil {
		t.Fatal(err)
	}
	broken := time.Now()
	w.Eventually(60*time.Second, "GitSynced=False naming spec.approvals.signedBy", func(ctx context.Context) (bool, error) {
		c := conditions.Get(w.Rollout(w.NS, "echoserver"), v1alpha1.GitSyncedCondition)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "spec.approvals.signedBy"), nil
	})
	t.Logf("GitSynced=False %v after the Secret broke", time.Since(broken).Round(100*time.Millisecond))
	keys.Data = map[string][]byte{"approver.asc": approver.public}
	if err := w.C.Update(context.Background(), keys); err != nil {
		t.Fatal(err)
	}
	w.holdsGate(2*time.Second, 1)

	// When an approver signs the merge, the gate opens and the Rollout
	// names the commit and the key.
	if merge, err = w.git.SignTip("app", "main", approver.sign); err != nil {
		t.Fatal(err)
	}
	w.Eventually(60*time.Second, "step 1 approved by the signed merge", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		return ro.Status.CurrentStepIndex >= 2, nil
	})
	c := conditions.Get(ro, v1alpha1.ApprovalVerifiedCondition)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, merge) || !strings.Contains(c.Message, fmt.Sprintf("%X", approver.entity.PrimaryKey.Fingerprint)) {
		t.Fatalf("ApprovalVerified = %+v; want True naming %s and the approver's key", c, merge)
	}
}

// rejected waits for ApprovalVerified=False naming commit and why, and a
// Warning event saying the same.
func (w *world) rejected(commit, why string) {
	w.T.Helper()
	w.Eventually(30*time.Second, "the approval in "+commit+" rejected: "+why, func(ctx context.Context) (bool, error) {
		c := conditions.Get(w.Rollout(w.NS, "echoserver"), v1alpha1.ApprovalVerifiedCondition)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonApprovalRejected &&
			strings.Contains(c.Message, commit) && strings.Contains(c.Message, why), nil
	})
	w.Eventually(30*time.Second, "a Warning event naming "+commit, func(ctx context.Context) (bool, error) {
		var list corev1.EventList
		if err := w.C.List(ctx, &list, client.InNamespace(w.NS)); err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.InvolvedObject.Name == "echoserver" && e.Type == corev1.EventTypeWarning &&
				e.Reason == v1alpha1.ReasonApprovalRejected && strings.Contains(e.Message, commit) {
				return true, nil
			}
		}
		return false, nil
	})
}

// pgpKey is an OpenPGP key pair of someone who signs merges.
type pgpKey struct {
	entity *openpgp.Entity
	public []byte
}

func newPGPKey(t *testing.T, name string) pgpKey {
	t.Helper()
	e, err := openpgp.NewEntity(name, "", name+"@rollgate.invalid", nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	aw, err := armor.Encode(&b, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Serialize(aw); err != nil {
		t.Fatal(err)
	}
	aw.Close()
	return pgpKey{entity: e, public: b.Bytes()}
}

// sign signs a commit as `git commit -S` does.
func (k pgpKey) sign(payload []byte) ([]byte, error) {
	var b bytes.Buffer
	err := openpgp.ArmoredDetachSign(&b, k.entity, bytes.NewReader(payload), nil)
	return b.Bytes(), err
}

// TestNoRouteAroundAGateUnderAnApprovalPolicy: under the Repository's
// approval policy, spec.promote set in the cluster (a `kubectl patch`,
// Argo CD's promote action) skips no gate: the gate holds and the Rollout
// says what promote waits for. spec.disabled set mid-release does not hand
// the unapproved revision to every pod either: the workload stays held as
// it stands.
func TestNoRouteAroundAGateUnderAnApprovalPolicy(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.givenAppFromGit(echoRollout, "approvals: {mergeOnly: true}")
	w.ApplyYAML(echoApp("echo:2.0"))
	var ro *v1alpha1.Rollout
	w.Eventually(90*time.Second, "step 1 waiting for approval", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		return ro.Status.AwaitingApproval != nil && w.Pods(w.NS, "echoserver")["echo:2.0"] == [2]int{1, 1}, nil
	})

	w.Update(ro, func() { ro.Spec.Promote = &v1alpha1.RevisionRequest{Revision: ro.Status.CanaryRevision} })
	w.Eventually(30*time.Second, "the Rollout says spec.promote waits for step 1", func(ctx context.Context) (bool, error) {
		return strings.Contains(w.Rollout(w.NS, "echoserver").Status.Message, "spec.promote waits"), nil
	})
	w.holdsGate(3*time.Second, 1)
	if p := w.Pods(w.NS, "echoserver"); p["echo:2.0"][1] != 1 {
		t.Fatalf("pods by image %v after spec.promote, want still 1 of echo:2.0", p)
	}

	w.Update(ro, func() { ro.Spec.Promote, ro.Spec.Disabled = nil, true })
	w.Eventually(30*time.Second, "disabled, the workload held", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		return ro.Status.Phase == v1alpha1.PhaseDisabled && strings.Contains(ro.Status.Message, "approval policy"), nil
	})
	w.Holds(3*time.Second, "no pod of echo:2.0 beyond the approved batch", func(ctx context.Context) error {
		if p := w.Pods(w.NS, "echoserver"); p["echo:2.0"][1] > 1 {
			return fmt.Errorf("pods by image %v: disabling rolled the unapproved revision out", p)
		}
		if d := w.Deployment(w.NS, "echoserver"); !d.Spec.Paused {
			return fmt.Errorf("the Deployment was handed back (paused=false)")
		}
		return nil
	})
}
