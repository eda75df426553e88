package workload

import (
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

func rollout(extra bool) *v1alpha1.Rollout {
	return &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
		Spec: v1alpha1.RolloutSpec{
			WorkloadRef: v1alpha1.WorkloadRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{
				Steps:                        []v1alpha1.CanaryStep{{Replicas: ptr.To(intstr.FromInt32(1))}},
				EnableExtraWorkloadForCanary: extra,
			}},
		},
	}
}

func rollingUpdate(surge, unavailable string) appsv1.DeploymentStrategy {
	s, u := intstr.FromString(surge), intstr.FromString(unavailable)
	return appsv1.DeploymentStrategy{
		Type:          appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &s, MaxUnavailable: &u},
	}
}

func deploy(image string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", Labels: map[string]string{v1alpha1.LabelControlled: "true"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](10),
			Template: *template(image),
			Strategy: rollingUpdate("25%", "25%"),
		},
	}
}

// admit runs Admit and fails the test on an error or another verdict.
func admit(t *testing.T, u Update, want Verdict) *Control {
	t.Helper()
	got, err := Admit(u)
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	if got != want {
		t.Fatalf("Admit verdict = %s, want %s", got, want)
	}
	ctrl, err := ParseControl(u.New)
	if err != nil {
		t.Fatal(err)
	}
	return ctrl
}

func TestAdmitDeploymentPartition(t *testing.T) {
	ro := rollout(false)
	old, upd := deploy("web:v1"), deploy("web:v2")
	ctrl := admit(t, Update{Old: old, New: upd, Rollout: ro}, Held)
	if !upd.Spec.Paused || upd.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || upd.Spec.Strategy.RollingUpdate != nil {
		t.Fatalf("held Deployment: paused=%v strategy=%+v, want paused Recreate", upd.Spec.Paused, upd.Spec.Strategy)
	}
	if ctrl.StableRevision != Revision(&old.Spec.Template) || ctrl.CanaryRevision != Revision(&upd.Spec.Template) || ctrl.Style != StylePartition {
		t.Fatalf("control = %+v", ctrl)
	}
	if d := ctrl.Declared; d.Paused == nil || *d.Paused || d.DeploymentStrategy == nil || d.DeploymentStrategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Fatalf("declared = %+v, want paused=false and RollingUpdate", d)
	}

	// A GitOps re-apply sends the declared strategy again, now 50%/0.
	reapply := deploy("web:v2")
	reapply.Spec.Strategy = rollingUpdate("50%", "0")
	reapply.Annotations = nil // server-side apply dropped the annotation it "owned"
	ctrl = admit(t, Update{Old: upd, New: reapply, Rollout: ro}, Reasserted)
	if !reapply.Spec.Paused || reapply.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Fatalf("re-applied Deployment: paused=%v strategy=%+v, want the hold back", reapply.Spec.Paused, reapply.Spec.Strategy)
	}
	if got := ctrl.Declared.DeploymentStrategy.RollingUpdate.MaxSurge.String(); got != "50%" {
		t.Fatalf("declared maxSurge = %s, want the re-applied 50%%", got)
	}

	// kubectl edit of the replicas only: declared values stay.
	scaled := reapply.DeepCopy()
	scaled.Spec.Replicas = ptr.To[int32](12)
	ctrl = admit(t, Update{Old: reapply, New: scaled, Rollout: ro}, Reasserted)
	if *ctrl.Declared.Paused || ctrl.Declared.DeploymentStrategy.Type != appsv1.RollingUpdateDeploymentStrategyType || *scaled.Spec.Replicas != 12 {
		t.Fatalf("after scale: declared=%+v replicas=%d", ctrl.Declared, *scaled.Spec.Replicas)
	}

	// Git reverts the image (and the strategy, to 25%/25%): a rollback.
	revert := deploy("web:v1")
	ctrl = admit(t, Update{Old: scaled, New: revert, Rollout: ro}, Reasserted)
	if !ctrl.Rollback || ctrl.CanaryRevision != Revision(&upd.Spec.Template) {
		t.Fatalf("after revert: control = %+v, want rollback of the canary", ctrl)
	}

	// rollgate's own release passes untouched; Release restores Git's values.
	done := revert.DeepCopy()
	if err := Release(done, ctrl); err != nil {
		t.Fatal(err)
	}
	admit(t, Update{Old: revert, New: done, Rollout: ro, FromRollgate: true}, Unchanged)
	if done.Spec.Paused || done.Spec.Strategy.RollingUpdate.MaxSurge.String() != "25%" || done.Annotations[v1alpha1.AnnotationControl] != "" {
		t.Fatalf("released: paused=%v strategy=%+v annotations=%v", done.Spec.Paused, done.Spec.Strategy, done.Annotations)
	}
}

func TestAdmitPassesThrough(t *testing.T) {
	ro := rollout(false)
	unlabelled := deploy("web:v2")
	delete(unlabelled.Labels, v1alpha1.LabelControlled)
	zero := deploy("web:v2")
	zero.Spec.Replicas = ptr.To[int32](0)
	scaled := deploy("web:v1")
	scaled.Spec.Replicas = ptr.To[int32](3)
	for name, u := range map[string]Update{
		"no Rollout":                {Old: deploy("web:v1"), New: deploy("web:v2")},
		"from rollgate":             {Old: deploy("web:v1"), New: deploy("web:v2"), Rollout: ro, FromRollgate: true},
		"label removed, no Rollout": {Old: deploy("web:v1"), New: unlabelled},
		"scaled to zero":            {Old: deploy("web:v1"), New: zero, Rollout: ro},
		"template unchanged":        {Old: deploy("web:v1"), New: scaled, Rollout: ro},
	} {
		t.Run(name, func(t *testing.T) {
			if ctrl := admit(t, u, Unchanged); ctrl != nil {
				t.Fatalf("control = %+v, want none", ctrl)
			}
		})
	}
}

// A writer that sends the whole object as Git declares it drops rollgate's
// label and annotation: the decision comes from the old object and the
// Rollout, and the marks are put back.
func TestAdmitWholeObjectWrite(t *testing.T) {
	ro := rollout(false)
	strip := func(d *appsv1.Deployment) *appsv1.Deployment {
		delete(d.Labels, v1alpha1.LabelControlled)
		delete(d.Annotations, v1alpha1.AnnotationControl)
		return d
	}
	// Not yet held: the replace with a new image is held.
	upd := strip(deploy("web:v2"))
	ctrl := admit(t, Update{Old: deploy("web:v1"), New: upd, Rollout: ro}, Held)
	if ctrl == nil || !upd.Spec.Paused || upd.Labels[v1alpha1.LabelControlled] == "" {
		t.Fatalf("replace with a new image: control=%+v paused=%v labels=%v, want held and labelled", ctrl, upd.Spec.Paused, upd.Labels)
	}
	// Mid-release: the replace (same canary image, Git's strategy) is re-asserted.
	again := strip(deploy("web:v2"))
	ctrl = admit(t, Update{Old: upd, New: again, Rollout: ro}, Reasserted)
	if ctrl == nil || !again.Spec.Paused || again.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType ||
		again.Labels[v1alpha1.LabelControlled] == "" {
		t.Fatalf("replace mid-release: control=%+v spec=%+v labels=%v, want the hold re-asserted", ctrl, again.Spec, again.Labels)
	}
	// Same template, no release: only the label comes back.
	same := strip(deploy("web:v1"))
	if ctrl := admit(t, Update{Old: deploy("web:v1"), New: same, Rollout: ro}, Unchanged); ctrl != nil || same.Labels[v1alpha1.LabelControlled] == "" {
		t.Fatalf("replace with the same template: control=%+v labels=%v, want no hold and the label back", ctrl, same.Labels)
	}
}

func TestAdmitCanaryStyleAndRelease(t *testing.T) {
	upd := deploy("web:v2")
	ctrl := admit(t, Update{Old: deploy("web:v1"), New: upd, Rollout: rollout(true)}, Held)
	if !upd.Spec.Paused || upd.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ctrl.Style != StyleCanary {
		t.Fatalf("canary style: paused=%v strategy=%s style=%s, want only paused", upd.Spec.Paused, upd.Spec.Strategy.Type, ctrl.Style)
	}
	// The Rollout is gone: the next update releases the Deployment.
	next := upd.DeepCopy()
	admit(t, Update{Old: upd, New: next}, Released)
	if next.Spec.Paused || next.Annotations[v1alpha1.AnnotationControl] != "" {
		t.Fatalf("released: paused=%v annotations=%v", next.Spec.Paused, next.Annotations)
	}
}

func TestAdmitStatefulSet(t *testing.T) {
	sts := func(image string, partition int32) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Labels: map[string]string{v1alpha1.LabelControlled: "true"}},
			Spec: appsv1.StatefulSetSpec{
				Replicas: ptr.To[int32](5),
				Template: *template(image),
				UpdateStrategy: appsv1.StatefulSetUpdateStrategy{
					Type:          appsv1.RollingUpdateStatefulSetStrategyType,
					RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To(partition)},
				},
			},
		}
	}
	upd := sts("db:v2", 0)
	ctrl := admit(t, Update{Old: sts("db:v1", 0), New: upd, Rollout: rollout(false)}, Held)
	if p := *upd.Spec.UpdateStrategy.RollingUpdate.Partition; p != HoldPartition || *ctrl.Partition != HoldPartition {
		t.Fatalf("held partition = %d (control %d), want %d", p, *ctrl.Partition, HoldPartition)
	}
	// The reconciler moved the partition to 3; Git re-applies partition 0.
	ctrl.Partition = ptr.To[int32](3)
	moved := upd.DeepCopy()
	if err := enforce(moved, ctrl); err != nil {
		t.Fatal(err)
	}
	reapply := sts("db:v2", 0)
	ctrl = admit(t, Update{Old: moved, New: reapply, Rollout: rollout(false)}, Reasserted)
	if p := *reapply.Spec.UpdateStrategy.RollingUpdate.Partition; p != 3 {
		t.Fatalf("re-applied partition = %d, want the held 3", p)
	}
	if p := *ctrl.Declared.StatefulSetStrategy.RollingUpdate.Partition; p != 0 {
		t.Fatalf("declared partition = %d, want 0", p)
	}
	// A new revision mid-release goes back to holding every pod.
	v3 := sts("db:v3", 0)
	ctrl = admit(t, Update{Old: reapply, New: v3, Rollout: rollout(false)}, Reasserted)
	if *v3.Spec.UpdateStrategy.RollingUpdate.Partition != HoldPartition || ctrl.CanaryRevision != Revision(&v3.Spec.Template) {
		t.Fatalf("after a new revision: partition=%d control=%+v", *v3.Spec.UpdateStrategy.RollingUpdate.Partition, ctrl)
	}
	if err := Release(v3, ctrl); err != nil {
		t.Fatal(err)
	}
	if p := *v3.Spec.UpdateStrategy.RollingUpdate.Partition; p != 0 {
		t.Fatalf("released partition = %d, want the declared 0", p)
	}
}

func TestAdmitDaemonSet(t *testing.T) {
	ds := func(image string) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "agent", Labels: map[string]string{v1alpha1.LabelControlled: "true"}},
			Spec: appsv1.DaemonSetSpec{
				Template:       *template(image),
				UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType},
			},
		}
	}
	upd := ds("agent:v2")
	ctrl := admit(t, Update{Old: ds("agent:v1"), New: upd, Rollout: rollout(false)}, Held)
	if upd.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType || ctrl.Style != StyleOnDelete {
		t.Fatalf("held DaemonSet strategy = %s, style %s", upd.Spec.UpdateStrategy.Type, ctrl.Style)
	}
	reapply := ds("agent:v2")
	admit(t, Update{Old: upd, New: reapply, Rollout: rollout(false)}, Reasserted)
	if reapply.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
		t.Fatalf("re-applied strategy = %s, want OnDelete", reapply.Spec.UpdateStrategy.Type)
	}
}

// TestAdmitKeepsHeldWithoutRollout: a workload whose Rollout was deleted
// mid-release with spec.onDelete Hold stays held through a GitOps
// re-apply of the declared strategy, a label removal and a new image,
// with no Rollout naming it.
func TestAdmitKeepsHeldWithoutRollout(t *testing.T) {
	upd := deploy("web:v2")
	ctrl := admit(t, Update{Old: deploy("web:v1"), New: upd, Rollout: rollout(false)}, Held)
	ctrl.HeldWithoutRollout = true
	if err := setControl(upd, ctrl); err != nil {
		t.Fatal(err)
	}
	reapply := deploy("web:v3") // what Git declares: no rollgate label or annotation
	delete(reapply.Labels, v1alpha1.LabelControlled)
	admit(t, Update{Old: upd, New: reapply}, KeptHeld)
	if !reapply.Spec.Paused || reapply.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || reapply.Labels[v1alpha1.LabelControlled] == "" {
		t.Fatalf("re-applied without a Rollout: paused=%v strategy=%s labels=%v, want still held and labelled",
			reapply.Spec.Paused, reapply.Spec.Strategy.Type, reapply.Labels)
	}
	if got, err := ParseControl(reapply); err != nil || got == nil || !got.HeldWithoutRollout {
		t.Fatalf("control after the re-apply = %+v, %v; want the mark kept", got, err)
	}
}

// TestAdmitUnreadableControl: a control annotation edited by hand into
// something rollgate cannot read lets updates pass as sent (refusing them
// would refuse every later update of the workload), and reading it names
// the annotation and the way out.
func TestAdmitUnreadableControl(t *testing.T) {
	old := deploy("web:v1")
	old.Annotations = map[string]string{v1alpha1.AnnotationControl: "{not json"}
	upd := old.DeepCopy()
	upd.Spec.Replicas = ptr.To[int32](3)
	got, err := Admit(Update{Old: old, New: upd, Rollout: rollout(false)})
	if err != nil || got != Unreadable {
		t.Fatalf("Admit = %s, %v; want Unreadable and no error", got, err)
	}
	_, err = ParseControl(old)
	if !errors.Is(err, ErrInvalidControl) || !strings.Contains(err.Error(), "kubectl annotate deployment web "+v1alpha1.AnnotationControl+"-") {
		t.Fatalf("ParseControl error %v; want ErrInvalidControl naming the fix", err)
	}
}
