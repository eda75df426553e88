package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"path"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/reconciler/workload"
)

// revertInGit writes the revert of a failed release to Git, once: the
// stable images go back into the workload's manifest (plain manifests,
// kustomize images, or Helm values marked with a setter comment) on a
// revert branch or, with revertPolicy Commit, on the tracked branch. Until
// Git changes, the workload stays held at the stable revision, so a
// re-apply of the bad version by the GitOps tool moves no pod.
func (r *Reconciler) revertInGit(ctx context.Context, sc *scope) error {
	ro := sc.ro
	cleanupReverts(ctx, sc)
	if sc.git == nil || ro.Status.Phase != v1alpha1.PhaseFailed || ro.Status.StableRevision == "" ||
		ro.Status.CanaryRevision == ro.Status.StableRevision {
		return nil
	}
	if ro.Status.Git != nil && ro.Status.Git.RevertBranch != "" {
		return nil
	}
	images, err := r.stableImages(ctx, ro)
	if err != nil {
		return err
	}
	policy := gitsync.RevertPropose
	if sc.repository.Spec.RevertPolicy == "Commit" {
		policy = gitsync.RevertDirect
	}
	// Writing it wakes the gates of what it fetched (gitsource.Repo.Revert).
	out, err := sc.git.Revert(ctx, gitsync.RevertOptions{
		TrackedBranch: trackedBranch(ro, sc.repository),
		Paths:         []string{path.Dir(ro.Spec.Git.Path)},
		Policy:        policy,
		By:            "rollgate",
	}, gitsync.RevertRequest{
		Namespace: ro.Namespace, Name: ro.Name, Revision: ro.Status.CanaryRevision,
		Workload: gitsync.WorkloadRef{Kind: ro.Spec.WorkloadRef.Kind, Name: ro.Spec.WorkloadRef.Name},
		Images:   images,
	})
	if err != nil {
		return fmt.Errorf("writing the revert of revision %s to Git: %w", ro.Status.CanaryRevision, err)
	}
	if ro.Status.Git == nil {
		ro.Status.Git = &v1alpha1.GitStatus{}
	}
	ro.Status.Git.RevertBranch = out.Branch
	if r.Recorder != nil {
		msg := fmt.Sprintf("revert of revision %s written to branch %s (commit %s)", ro.Status.CanaryRevision, out.Branch, out.Commit)
		if len(out.Missing) > 0 {
			msg += fmt.Sprintf("; no image location found in Git for containers %v", out.Missing)
		}
		r.Recorder.Event(ro, corev1.EventTypeNormal, "RevertProposed", msg)
	}
	return nil
}

// cleanupReverts asks for the revert branches of the Rollout that the
// tracked branch already holds to be deleted (gitsync.CleanupRevertBranches),
// when a release has ended: the Rollout is Healthy and its step state
// Completed or RolledBack. The ask names the occasion (that state, the
// stable revision and the tracked head the controller last fetched), so
// it is served once per ended release, again when the tracked head moves
// while the Rollout rests, and once after a controller restart.
//
// Why then. A revert is merged to undo a failed release, and the release
// reaches RolledBack only once the workload's template is back at the
// stable revision, that is once the GitOps tool applied the merged revert
// from the tracked branch: at that moment the tracked branch holds the
// revert, before the next release edits the same file again (after which
// its content no longer matches and the branch would stay). Completed
// covers a revert merged while the next release was under way.
//
// Why it is safe whatever the timing. The withdrawn first try deleted a
// Rollout's revert branches when a release reached a gate, and an
// approval push that finished after an abort took the new, unmerged
// revert with it. Here nothing is deleted for being old or for the state
// the Rollout is in: a branch goes only when every file its revert commit
// changed has, on the tracked branch, the content the revert gives it,
// judged at the branch's head and deleted only if the branch still points
// there. A revert pushed but not merged changes those files away from
// what the tracked branch holds (Revert pushes only a change), so it is
// kept at every occasion, in every cluster of a fleet (the judgement
// reads only Git). Failures are logged and tried again at the next
// occasion; they never touch the release.
func cleanupReverts(ctx context.Context, sc *scope) {
	ro := sc.ro
	if sc.git == nil || ro.Spec.Git == nil || ro.Status.Phase != v1alpha1.PhaseHealthy {
		return
	}
	state := ro.Status.CurrentStepState
	if state != v1alpha1.StepCompleted && state != v1alpha1.StepRolledBack {
		return
	}
	tracked := trackedBranch(ro, sc.repository)
	head, _ := sc.git.Head(tracked)
	sc.git.CleanupReverts(log.FromContext(ctx), client.ObjectKeyFromObject(ro), tracked,
		string(state)+"/"+ro.Status.StableRevision+"/"+head)
}

// stableImages returns container name -> image of the stable revision's
// pod template, read from the workload's history (the ReplicaSet or the
// ControllerRevision of that revision).
func (r *Reconciler) stableImages(ctx context.Context, ro *v1alpha1.Rollout) (map[string]string, error) {
	tpl, err := r.templateOf(ctx, ro, ro.Status.StableRevision)
	if err != nil {
		return nil, err
	}
	images := map[string]string{}
	for _, c := range append(tpl.Spec.InitContainers, tpl.Spec.Containers...) {
		images[c.Name] = c.Image
	}
	return images, nil
}

func (r *Reconciler) templateOf(ctx context.Context, ro *v1alpha1.Rollout, revision string) (*corev1.PodTemplateSpec, error) {
	ref := ro.Spec.WorkloadRef
	key := client.ObjectKey{Namespace: ro.Namespace, Name: ref.Name}
	if ref.Kind == "Deployment" {
		var d appsv1.Deployment
		if err := r.Get(ctx, key, &d); err != nil {
			return nil, err
		}
		// The cache keeps no ReplicaSet's template (workload.StripReplicaSet):
		// read the Deployment's ReplicaSets from the API server.
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil {
			return nil, fmt.Errorf("Deployment %s: selector: %w", ref.Name, err)
		}
		var list appsv1.ReplicaSetList
		if err := r.APIReader.List(ctx, &list, client.InNamespace(ro.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return nil, err
		}
		for i := range list.Items {
			rs := &list.Items[i]
			if owned(rs.OwnerReferences, d.UID) && workload.Revision(&rs.Spec.Template) == revision {
				return &rs.Spec.Template, nil
			}
		}
		return nil, fmt.Errorf("no ReplicaSet of Deployment %s holds stable revision %s", ref.Name, revision)
	}
	var uid any
	switch ref.Kind {
	case "StatefulSet":
		var s appsv1.StatefulSet
		if err := r.Get(ctx, key, &s); err != nil {
			return nil, err
		}
		uid = s.UID
	case "DaemonSet":
		var s appsv1.DaemonSet
		if err := r.Get(ctx, key, &s); err != nil {
			return nil, err
		}
		uid = s.UID
	}
	var list appsv1.ControllerRevisionList
	if err := r.List(ctx, &list, client.InNamespace(ro.Namespace)); err != nil {
		return nil, err
	}
	for i := range list.Items {
		cr := &list.Items[i]
		if !owned(cr.OwnerReferences, uid) {
			continue
		}
		var data struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if json.Unmarshal(cr.Data.Raw, &data) == nil && workload.Revision(&data.Spec.Template) == revision {
			return &data.Spec.Template, nil
		}
	}
	return nil, fmt.Errorf("no ControllerRevision of %s %s holds stable revision %s", ref.Kind, ref.Name, revision)
}

func owned(refs []metav1.OwnerReference, uid any) bool {
	for _, o := range refs {
		if any(o.UID) == uid {
			return true
		}
	}
	return false
}
