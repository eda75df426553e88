package workload

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// revisionAnnotation is the Deployment controller's revision number on
// Deployments and ReplicaSets.
const revisionAnnotation = "deployment.kubernetes.io/revision"

// deployment releases a Deployment, in the partition style (ReplicaSets
// scaled by rollgate) or the canary style (see canary.go).
type deployment struct {
	base
}

// deployState is what one call reads about a Deployment.
type deployState struct {
	d    *appsv1.Deployment
	ctrl *Control
	// rss are the ReplicaSets the Deployment controls, oldest first.
	rss []*appsv1.ReplicaSet
	// canaries are the canary Deployments of the canary style.
	canaries []*appsv1.Deployment
	// revs maps a ReplicaSet UID to the revision of its pods.
	revs map[types.UID]string
	pods []*corev1.Pod
	now  time.Time
}

func (s *deployState) revOf(p *corev1.Pod) string {
	if ref := metav1.GetControllerOf(p); ref != nil {
		return s.revs[ref.UID]
	}
	return ""
}

// style is the release style: the held release's, else the Rollout's.
func (a *deployment) style(s *deployState) Style {
	if s.ctrl != nil {
		return s.ctrl.Style
	}
	return StyleFor(a.ro, "Deployment")
}

func (a *deployment) Cover(ctx context.Context) error {
	return a.cover(ctx, &appsv1.Deployment{}, true)
}

func (a *deployment) Uncover(ctx context.Context) error {
	return a.cover(ctx, &appsv1.Deployment{}, false)
}

func (a *deployment) LeaveHeld(ctx context.Context) (bool, error) {
	return a.leaveHeld(ctx, &appsv1.Deployment{})
}

// read reads the Deployment, its ReplicaSets, canary Deployments and pods.
func (a *deployment) read(ctx context.Context) (*deployState, error) {
	s := &deployState{d: &appsv1.Deployment{}, revs: map[types.UID]string{}, now: a.clock()}
	if err := a.get(ctx, s.d); err != nil {
		return nil, err
	}
	ctrl, err := ParseControl(s.d)
	if err != nil {
		return nil, err
	}
	s.ctrl = ctrl
	owners := map[types.UID]bool{}
	rss, err := a.ownedReplicaSets(ctx, s.d)
	if err != nil {
		return nil, err
	}
	s.rss = rss
	for _, rs := range rss {
		s.revs[rs.UID], owners[rs.UID] = ReplicaSetRevision(rs), true
	}
	if s.canaries, err = a.canaryDeployments(ctx, s.d); err != nil {
		return nil, err
	}
	for _, cd := range s.canaries {
		crss, err := a.ownedReplicaSets(ctx, cd)
		if err != nil {
			return nil, err
		}
		for _, rs := range crss {
			s.revs[rs.UID], owners[rs.UID] = cd.Labels[v1alpha1.LabelRevision], true
		}
	}
	s.pods, err = a.listPods(ctx, s.d.Spec.Selector, owners)
	return s, err
}

// ownedReplicaSets lists the ReplicaSets d controls, oldest first.
func (a *deployment) ownedReplicaSets(ctx context.Context, d *appsv1.Deployment) ([]*appsv1.ReplicaSet, error) {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("selector of Deployment %s: %w", d.Name, err)
	}
	out, err := listOwned(ctx, &a.base, newReplicaSetList, replicaSetItems, d.Namespace, sel, map[types.UID]bool{d.UID: true})
	if err != nil {
		return nil, fmt.Errorf("list ReplicaSets of %s: %w", d.Name, err)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].CreationTimestamp.Equal(&out[j].CreationTimestamp) {
			return out[i].CreationTimestamp.Before(&out[j].CreationTimestamp)
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

func (a *deployment) Observe(ctx context.Context) (Observation, error) {
	s, err := a.read(ctx)
	if err != nil {
		return Observation{}, err
	}
	o := Observation{Replicas: ptr.Deref(s.d.Spec.Replicas, 1)}
	if err := observeControl(&o, s.d); err != nil {
		return o, err
	}
	tally(&o, s.pods, s.revOf, s.d.Spec.MinReadySeconds, s.now)
	_, o.MaxUnavailable = deploymentBudget(s.d, s.ctrl, nil)
	// The canary style's release ends when HandBack has removed the
	// canary Deployment, after the Deployment itself rolled out: until
	// then the release still holds the workload, so that the reconciler
	// keeps finalizing (and the planner does not call it Healthy).
	o.Held = o.Held || len(s.canaries) > 0
	o.Complete = !o.Held && deploymentComplete(s.d)
	if a.style(s) == StylePartition {
		o.RevisionLabel, o.LabelValues = appsv1.DefaultDeploymentUniqueLabelKey, s.hashes()
	}
	return o, nil
}

// hashes maps the revision of each of the Deployment's ReplicaSets to the
// pod-template-hash its pods carry, where the two differ: those of the
// ReplicaSets the Deployment controller made. A ReplicaSet rollgate makes
// has the revision as its hash (createReplicaSet), so a revision without
// a ReplicaSet yet has its own value. The oldest ReplicaSet of a revision
// counts, as in find.
func (s *deployState) hashes() map[string]string {
	var out map[string]string
	seen := map[string]bool{}
	for _, rs := range s.rss {
		rev, hash := s.revs[rs.UID], rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
		if rev == "" || seen[rev] {
			continue
		}
		seen[rev] = true
		if hash != "" && hash != rev {
			if out == nil {
				out = map[string]string{}
			}
			out[rev] = hash
		}
	}
	return out
}

// deploymentComplete reports whether the Deployment controller finished
// rolling out the current spec (as `kubectl rollout status` decides).
func deploymentComplete(d *appsv1.Deployment) bool {
	r := ptr.Deref(d.Spec.Replicas, 1)
	st := d.Status
	return st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == r && st.Replicas == r && st.AvailableReplicas == r
}

// deploymentBudget returns the declared maxSurge and maxUnavailable (or
// the override) resolved as the Deployment controller does; a Recreate
// strategy counts as the default 25%/25%. Both 0 makes maxSurge 1.
func deploymentBudget(d *appsv1.Deployment, ctrl *Control, override *intstr.IntOrString) (surge, unavailable int32) {
	strategy := d.Spec.Strategy
	if ctrl != nil && ctrl.Declared.DeploymentStrategy != nil {
		strategy = *ctrl.Declared.DeploymentStrategy
	}
	def := intstr.FromString("25%")
	var ms, mu *intstr.IntOrString
	if ru := strategy.RollingUpdate; strategy.Type != appsv1.RecreateDeploymentStrategyType && ru != nil {
		ms, mu = ru.MaxSurge, ru.MaxUnavailable
	}
	if override != nil {
		mu = override
	}
	r := ptr.Deref(d.Spec.Replicas, 1)
	surge, unavailable = scaled(ms, def, r, true), min(scaled(mu, def, r, false), r)
	if surge == 0 && unavailable == 0 {
		surge = 1
	}
	return surge, unavailable
}

func (a *deployment) EnsureBatch(ctx context.Context, b Batch) (bool, error) {
	s, err := a.read(ctx)
	if err != nil {
		return false, err
	}
	if s.ctrl == nil {
		return false, fmt.Errorf("%s %s: %w", a.ro.Spec.WorkloadRef.Kind, a.key(), ErrNotHeld)
	}
	// Label first: the stable Service of the canary style is narrowed to
	// the revision label right after this, and must never select fewer
	// pods than are running. In place, the Services narrow by
	// pod-template-hash (Observe): only the canary pods get labels.
	if err := a.labelPods(ctx, s.pods, s.revOf, s.ctrl.CanaryRevision, b, a.style(s) == StyleCanary); err != nil {
		return false, err
	}
	if a.style(s) == StyleCanary {
		return a.ensureCanary(ctx, s, b)
	}
	r := ptr.Deref(s.d.Spec.Replicas, 1)
	c := clamp(b.CanaryReplicas, r)
	newRS := s.find(s.ctrl.CanaryRevision)
	if newRS == nil {
		return false, a.createReplicaSet(ctx, s)
	}
	surge, unavailable := deploymentBudget(s.d, s.ctrl, b.MaxUnavailable)
	done, err := a.scaleTo(ctx, s, newRS, c, surge, unavailable)
	if err != nil {
		return false, err
	}
	return done, nil
}

// find returns the oldest ReplicaSet of revision rev, as the Deployment
// controller would pick it as its new ReplicaSet.
func (s *deployState) find(rev string) *appsv1.ReplicaSet {
	for _, rs := range s.rss {
		if s.revs[rs.UID] == rev {
			return rs
		}
	}
	return nil
}

// scaleTo moves newRS (which may be nil when scaling back) towards canary
// replicas, the stable ReplicaSet towards the rest and every other
// ReplicaSet towards zero, one step at a time (see planScale). It reports
// whether all of them are there, with their pods existing and (new ones)
// available.
func (a *deployment) scaleTo(ctx context.Context, s *deployState, newRS *appsv1.ReplicaSet, canary, surge, unavailable int32) (bool, error) {
	r := ptr.Deref(s.d.Spec.Replicas, 1)
	stable := s.find(s.ctrl.StableRevision)
	if stable == nil || stable == newRS {
		stable = s.largestOld(newRS)
	}
	if stable == nil && r-canary > 0 {
		return false, fmt.Errorf("Deployment %s: no ReplicaSet of stable revision %s", s.d.Name, s.ctrl.StableRevision)
	}
	var order []*appsv1.ReplicaSet
	for _, rs := range s.rss {
		if rs != newRS && rs != stable {
			order = append(order, rs)
		}
	}
	for _, rs := range []*appsv1.ReplicaSet{newRS, stable} {
		if rs != nil {
			order = append(order, rs)
		}
	}
	plan := make([]replicaSet, len(order))
	done := true
	for i, rs := range order {
		target := int32(0)
		switch rs {
		case newRS:
			target = canary
		case stable:
			target = r - canary
		}
		var pods Pods
		for _, p := range s.pods {
			if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == rs.UID {
				pods.count(p, s.d.Spec.MinReadySeconds, s.now)
			}
		}
		plan[i] = replicaSet{Spec: ptr.Deref(rs.Spec.Replicas, 0), Available: pods.Ready, Target: target}
		done = done && plan[i].Spec == target && pods.Total == target && (rs != newRS || pods.Ready == target)
	}
	for i, n := range planScale(plan, r, surge, unavailable) {
		if n == plan[i].Spec {
			continue
		}
		rs := order[i]
		orig := rs.DeepCopy()
		rs.Spec.Replicas = ptr.To(n)
		if err := a.c.Patch(ctx, rs, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner)); err != nil {
			return false, fmt.Errorf("scale ReplicaSet %s to %d: %w", rs.Name, n, err)
		}
	}
	return done, nil
}

// largestOld returns the ReplicaSet other than newRS with the most
// replicas, the stand-in for a stable ReplicaSet that was removed.
func (s *deployState) largestOld(newRS *appsv1.ReplicaSet) *appsv1.ReplicaSet {
	var best *appsv1.ReplicaSet
	for _, rs := range s.rss {
		if rs != newRS && (best == nil || ptr.Deref(rs.Spec.Replicas, 0) > ptr.Deref(best.Spec.Replicas, 0)) {
			best = rs
		}
	}
	return best
}

// createReplicaSet creates the ReplicaSet of the canary revision at zero
// replicas, the way the Deployment controller would: controlled by the
// Deployment, its template the Deployment's plus pod-template-hash (set
// to the revision), which the selector requires too. The Deployment
// controller recognises it by its template (ignoring the hash) and keeps
// it as the new ReplicaSet when the Deployment resumes.
func (a *deployment) createReplicaSet(ctx context.Context, s *deployState) error {
	d, err := a.full(ctx, s)
	if err != nil {
		return err
	}
	rev := s.ctrl.CanaryRevision
	tpl := d.Spec.Template.DeepCopy()
	tpl.Labels = withLabel(tpl.Labels, appsv1.DefaultDeploymentUniqueLabelKey, rev)
	sel := d.Spec.Selector.DeepCopy()
	sel.MatchLabels = withLabel(sel.MatchLabels, appsv1.DefaultDeploymentUniqueLabelKey, rev)
	var maxRev int64
	for _, rs := range s.rss {
		if n, err := strconv.ParseInt(rs.Annotations[revisionAnnotation], 10, 64); err == nil && n > maxRev {
			maxRev = n
		}
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name:            d.Name + "-" + rev,
			Namespace:       d.Namespace,
			Labels:          tpl.Labels,
			Annotations:     map[string]string{revisionAnnotation: strconv.FormatInt(maxRev+1, 10)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))},
		},
		Spec: appsv1.ReplicaSetSpec{
			Replicas:        ptr.To[int32](0),
			MinReadySeconds: d.Spec.MinReadySeconds,
			Selector:        sel,
			Template:        *tpl,
		},
	}
	if err := a.c.Create(ctx, rs, client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("create ReplicaSet %s: %w", rs.Name, err)
	}
	return nil
}

// full reads the Deployment s read, template and all, from the API server
// (the cache keeps no template: StripDeployment). It refuses one that has
// changed what s read of it since (another Deployment of the same name, a
// new template): the caller acts on the next read instead.
func (a *deployment) full(ctx context.Context, s *deployState) (*appsv1.Deployment, error) {
	d := &appsv1.Deployment{}
	if err := a.liveReader().Get(ctx, a.key(), d); err != nil {
		return nil, fmt.Errorf("read Deployment %s: %w", a.key(), err)
	}
	if read := DeploymentRevision(s.d); d.UID != s.d.UID || Revision(&d.Spec.Template) != read {
		return nil, fmt.Errorf("Deployment %s changed since it was read (template at revision %s, read at %s): acting on the next read",
			a.key(), Revision(&d.Spec.Template), read)
	}
	return d, nil
}

func withLabel(m map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for key, val := range m {
		out[key] = val
	}
	out[k] = v
	return out
}

func (a *deployment) HandBack(ctx context.Context) (bool, error) {
	s, err := a.read(ctx)
	if err != nil {
		return false, err
	}
	if s.ctrl != nil {
		if err := a.labelLastBatch(ctx, s.pods, s.revOf, s.ctrl, a.style(s) == StyleCanary); err != nil {
			return false, err
		}
		return false, a.release(ctx, s)
	}
	// The canary style: the pods the Deployment creates once released
	// carry no revision label yet; labelled, they join the Services
	// narrowed to the new revision (a release finishing with all traffic
	// on it) before the canary Deployment's pods go. In place, the new
	// ReplicaSet's pod-template-hash already says it.
	if a.style(s) == StyleCanary {
		if labelled, err := a.labelRevisions(ctx, s.pods, s.revOf); !labelled || err != nil {
			return false, err
		}
	}
	if !deploymentComplete(s.d) {
		return false, nil
	}
	// The canary style's canary Deployment goes once the Deployment
	// itself carries the new revision everywhere, so capacity never dips.
	return len(s.canaries) == 0, a.deleteCanaries(ctx, s.canaries, "")
}

// release restores the declared settings and removes the annotation.
func (a *deployment) release(ctx context.Context, s *deployState) error {
	return a.update(ctx, s.d, func() error { return Release(s.d, s.ctrl) })
}

func (a *deployment) Rollback(ctx context.Context) (bool, error) {
	s, err := a.read(ctx)
	if err != nil {
		return false, err
	}
	if s.ctrl == nil {
		if err := a.deleteCanaries(ctx, s.canaries, ""); err != nil {
			return false, err
		}
		return len(s.canaries) == 0 && deploymentComplete(s.d), nil
	}
	if a.style(s) == StyleCanary {
		return a.rollbackCanary(ctx, s)
	}
	var newRS *appsv1.ReplicaSet
	if s.ctrl.CanaryRevision != s.ctrl.StableRevision {
		newRS = s.find(s.ctrl.CanaryRevision)
	}
	surge, unavailable := deploymentBudget(s.d, s.ctrl, nil)
	back, err := a.scaleTo(ctx, s, newRS, 0, surge, unavailable)
	if err != nil || !back {
		return false, err
	}
	if newRS != nil {
		// No pod is left in it: remove it, as if the release never happened.
		if err := a.c.Delete(ctx, newRS, client.Preconditions{UID: &newRS.UID}); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("delete ReplicaSet %s: %w", newRS.Name, err)
		}
		return false, nil
	}
	if DeploymentRevision(s.d) != s.ctrl.StableRevision {
		// Still held at the canary template (Git not reverted yet): the
		// workload stays held with every pod at the stable revision.
		return true, nil
	}
	return false, a.release(ctx, s)
}
