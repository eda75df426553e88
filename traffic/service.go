package traffic

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// services keeps the two Services of a release:
//
//   - the canary Service "<service>-canary", created and owned by the
//     Rollout: a copy of the stable Service without cluster IPs, node ports
//     or external addresses (a LoadBalancer becomes a NodePort so no second
//     cloud load balancer is bought), selecting the declared selector plus
//     the revision label = canary revision;
//   - the stable Service, whose selector gets the revision label = stable
//     revision while a release is in progress, so requests that routers send
//     to "stable" never reach canary pods (header-only A/B tests do not
//     leak). Its declared selector is saved in the annotation
//     rollgate.dev/original before the first change and written back by
//     Restore, so a restarted controller restores exactly.
//
// The stable Service is declared in Git. With Argo CD, ignore the two
// fields rollgate edits, and set RespectIgnoreDifferences=true so a sync
// does not undo them mid-release:
//
//	ignoreDifferences:
//	- kind: Service
//	  name: <service>
//	  jsonPointers:
//	  - /spec/selector/rollgate.dev~1revision
//	  - /metadata/annotations/rollgate.dev~1original
//
// If a sync removes them anyway, the next EnsureRoutes puts them back, and a
// selector changed in Git in the meantime becomes the new declared one.
type services struct {
	c      client.Client
	ro     *v1alpha1.Rollout
	stable string
	opts   Options
}

// savedSelector is the stable Service's declared state in the annotation.
type savedSelector struct {
	Selector map[string]string `json:"selector"`
}

func (s *services) key(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: s.ro.Namespace, Name: name}
}

func (s *services) canaryName() string { return CanaryServiceName(s.stable) }

// ensure creates or updates the canary Service and narrows the stable one.
// It returns whether the canary Service was created or changed (routes
// must not send it requests before its endpoints settle) and the canary
// Service as stored. A stable Service narrowed again, after a GitOps tool
// wrote its declared selector back, is not reported: it is no new traffic
// change, and the routes the same sync took back must come back at once.
func (s *services) ensure(ctx context.Context, d Desired) (bool, *corev1.Service, error) {
	if d.CanaryRevision == "" {
		return false, nil, fmt.Errorf("%w: the canary revision is empty", ErrInvalid)
	}
	if errs := validation.IsDNS1035Label(s.canaryName()); len(errs) > 0 {
		return false, nil, fmt.Errorf("%w: canary Service name %q: %v (shorten spec.strategy.*.trafficRoutings[].service)",
			ErrInvalid, s.canaryName(), errs)
	}
	var declared map[string]string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		stable := &corev1.Service{}
		if err := s.c.Get(ctx, s.key(s.stable), stable); err != nil {
			return notFound(err, "Service", s.ro.Namespace, s.stable)
		}
		var err error
		if declared, err = s.declaredSelector(stable); err != nil {
			return err
		}
		if err := s.podsLabelled(ctx, stable, declared); err != nil {
			return err
		}
		held := heldFor(s.ro, s.opts, d).forService()
		_, err = s.narrow(ctx, stable, declared, d.StableRevision, &held)
		return err
	})
	if err != nil {
		return false, nil, err
	}
	canary, changedCanary, err := s.ensureCanary(ctx, declared, d.CanaryRevision)
	if err != nil {
		return false, nil, err
	}
	return changedCanary, canary, nil
}

// podsLabelled holds the first narrowing of the stable Service until every
// running pod its declared selector matches carries the revision label:
// narrowed earlier, the Service would select fewer pods than serve (none at
// all at the start of a release) and requests would fail. The workload
// adapter labels the pods; the answer is a short wait, not an error.
func (s *services) podsLabelled(ctx context.Context, stable *corev1.Service, declared map[string]string) error {
	rev := s.opts.revisionLabel()
	if _, narrowed := stable.Spec.Selector[rev]; narrowed {
		return nil
	}
	var pods corev1.PodList
	if err := s.c.List(ctx, &pods, client.InNamespace(stable.Namespace), client.MatchingLabels(declared)); err != nil {
		return fmt.Errorf("list the pods of Service %s/%s: %w", stable.Namespace, stable.Name, err)
	}
	unlabelled := 0
	for _, p := range pods.Items {
		if _, ok := p.Labels[rev]; !ok && p.DeletionTimestamp == nil {
			unlabelled++
		}
	}
	if unlabelled > 0 {
		return &WaitError{After: podLabelPoll, Reason: fmt.Sprintf("%d pods of Service %s/%s do not carry %s yet", unlabelled, stable.Namespace, stable.Name, rev)}
	}
	return nil
}

// podLabelPoll is how soon to look again for pods to carry the revision
// label.
const podLabelPoll = 250 * time.Millisecond

// SliceServes reports whether an EndpointSlice lists a ready endpoint:
// what rollgate reads of a canary Service's slices before its routes send
// the canary requests. An endpoint whose ready condition is unset counts
// as ready, as the API defines it.
func SliceServes(sl *discoveryv1.EndpointSlice) bool {
	for _, ep := range sl.Endpoints {
		if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
			return true
		}
	}
	return false
}

// endpointPoll is how soon to look again for a ready endpoint of the
// canary Service.
const endpointPoll = 250 * time.Millisecond

// endpointsReady returns nil once an EndpointSlice of Service svc lists a
// ready endpoint, and a short wait before: routes that sent requests to a
// Service whose slices the EndpointSlice controller has not filled yet (at
// the start of a release, on a loaded control plane) would have the
// gateway answer them 503, with no server to send them to. An endpoint
// whose ready condition is unset counts as ready, as the API defines it.
func (s *services) endpointsReady(ctx context.Context, r client.Reader, svc *corev1.Service) error {
	var slices discoveryv1.EndpointSliceList
	if err := r.List(ctx, &slices, client.InNamespace(svc.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
		return fmt.Errorf("list the EndpointSlices of Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	for i := range slices.Items {
		if SliceServes(&slices.Items[i]) {
			return nil
		}
	}
	return &WaitError{After: endpointPoll, Reason: fmt.Sprintf("Service %s/%s has no ready endpoint in its EndpointSlices yet", svc.Namespace, svc.Name)}
}

// declaredSelector is the stable Service's selector as declared: the saved
// one while the live selector carries rollgate's revision key, otherwise
// the live one (never narrowed, or re-applied from Git since) without that
// key.
func (s *services) declaredSelector(stable *corev1.Service) (map[string]string, error) {
	keys := s.revisionKeys(stable)
	if raw, ok := stable.Annotations[v1alpha1.AnnotationOriginal]; ok && narrowedBy(stable, keys) {
		var saved savedSelector
		if err := json.Unmarshal([]byte(raw), &saved); err != nil {
			return nil, fmt.Errorf("%w: Service %s/%s: annotation %s: %v",
				ErrInvalid, stable.Namespace, stable.Name, v1alpha1.AnnotationOriginal, err)
		}
		return saved.Selector, nil
	}
	// Without the annotation (someone removed it), the revision key can
	// only be rollgate's: the rest is the declared selector.
	declared := maps.Clone(stable.Spec.Selector)
	for _, k := range keys {
		delete(declared, k)
	}
	if len(declared) == 0 {
		return nil, fmt.Errorf("%w: Service %s/%s has no selector", ErrInvalid, stable.Namespace, stable.Name)
	}
	return declared, nil
}

// revisionKeys are the pod labels the stable Service may be narrowed by:
// this router's, and the one the step held on it records, when another
// (a release that began narrowing by rollgate.dev/revision and goes on by
// pod-template-hash after an upgrade). Either comes off the selector.
func (s *services) revisionKeys(stable *corev1.Service) []string {
	keys := []string{s.opts.revisionLabel()}
	if h, err := ParseHeld(stable.Annotations); err == nil && h != nil && h.RevisionLabel != keys[0] {
		keys = append(keys, h.RevisionLabel)
	}
	return keys
}

// narrowedBy reports whether the Service's selector carries one of keys.
func narrowedBy(svc *corev1.Service, keys []string) bool {
	for _, k := range keys {
		if _, ok := svc.Spec.Selector[k]; ok {
			return true
		}
	}
	return false
}

// narrow sets the stable Service's selector to declared plus the stable
// revision, recording held, or to declared alone when revision is empty.
func (s *services) narrow(ctx context.Context, stable *corev1.Service, declared map[string]string, revision string, held *Held) (bool, error) {
	if revision == "" {
		return s.writeStable(ctx, stable, declared, "", nil)
	}
	raw, err := json.Marshal(savedSelector{Selector: declared})
	if err != nil {
		return false, err
	}
	return s.writeStable(ctx, stable, withKey(declared, s.opts.revisionLabel(), revision), string(raw), held)
}

// writeStable patches the stable Service's selector, original annotation
// ("" removes it) and held step (nil removes it) when they differ, with an
// optimistic lock.
func (s *services) writeStable(ctx context.Context, stable *corev1.Service, selector map[string]string, original string, held *Held) (bool, error) {
	labels, annotations := withHeld(stable.Labels, stable.Annotations, held)
	if original == "" {
		delete(annotations, v1alpha1.AnnotationOriginal)
	} else {
		annotations = withKey(annotations, v1alpha1.AnnotationOriginal, original)
	}
	if mapsEqual(stable.Spec.Selector, selector) && mapsEqual(stable.Labels, labels) && mapsEqual(stable.Annotations, annotations) {
		return false, nil
	}
	before := stable.DeepCopy()
	stable.Spec.Selector = selector
	stable.Labels, stable.Annotations = labels, annotations
	patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
	if err := s.c.Patch(ctx, stable, patch, s.opts.fieldOwner()); err != nil {
		return false, fmt.Errorf("patch Service %s/%s: %w", stable.Namespace, stable.Name, err)
	}
	return true, nil
}

// ensureCanary creates the canary Service, or updates the fields rollgate
// manages (selector, ports, revision label) when they drifted.
func (s *services) ensureCanary(ctx context.Context, declared map[string]string, revision string) (*corev1.Service, bool, error) {
	var out *corev1.Service
	var changed bool
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		stable := &corev1.Service{}
		if err := s.c.Get(ctx, s.key(s.stable), stable); err != nil {
			return notFound(err, "Service", s.ro.Namespace, s.stable)
		}
		want := s.buildCanary(stable, declared, revision)
		live := &corev1.Service{}
		err := s.c.Get(ctx, s.key(want.Name), live)
		if apierrors.IsNotFound(err) {
			out, changed = want, true
			if err := s.c.Create(ctx, want, s.opts.fieldOwner()); err != nil {
				return fmt.Errorf("create Service %s/%s: %w", want.Namespace, want.Name, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("get Service %s/%s: %w", want.Namespace, want.Name, err)
		}
		if !ownedBy(live, s.ro) {
			return conflict("Service", live)
		}
		out, changed = live, false
		if !canaryDrifted(live, want, s.opts.revisionLabel()) {
			return nil
		}
		live.Spec.Selector = want.Spec.Selector
		live.Spec.Ports = keepNodePorts(want.Spec.Ports, live.Spec.Ports)
		live.Labels = withKey(withKey(live.Labels, s.opts.revisionLabel(), revision), LabelCanaryOf, want.Labels[LabelCanaryOf])
		changed = true
		if err := s.c.Update(ctx, live, s.opts.fieldOwner()); err != nil {
			return fmt.Errorf("update Service %s/%s: %w", live.Namespace, live.Name, err)
		}
		return nil
	})
	return out, changed, err
}

// buildCanary copies the stable Service into the canary Service.
func (s *services) buildCanary(stable *corev1.Service, declared map[string]string, revision string) *corev1.Service {
	rev := s.opts.revisionLabel()
	c := &corev1.Service{}
	c.Name = s.canaryName()
	c.Namespace = stable.Namespace
	c.Labels = withKey(withKey(copyMeta(stable.Labels, gitopsKey), rev, revision), LabelCanaryOf, stable.Name)
	c.Annotations = copyMeta(stable.Annotations, gitopsKey)
	c.OwnerReferences = append(c.OwnerReferences, ownerRef(s.ro))
	spec := stable.Spec.DeepCopy()
	if spec.ClusterIP != corev1.ClusterIPNone {
		spec.ClusterIP = "" // headless stays headless; otherwise a new IP
	}
	spec.ClusterIPs = nil
	if spec.Type == corev1.ServiceTypeLoadBalancer {
		spec.Type = corev1.ServiceTypeNodePort
	}
	spec.HealthCheckNodePort = 0
	spec.ExternalIPs = nil
	spec.LoadBalancerIP = "" //nolint:staticcheck // cleared, never set
	spec.LoadBalancerSourceRanges = nil
	spec.LoadBalancerClass = nil
	spec.AllocateLoadBalancerNodePorts = nil
	for i := range spec.Ports {
		spec.Ports[i].NodePort = 0
	}
	spec.Selector = withKey(declared, rev, revision)
	c.Spec = *spec
	return c
}

// canaryDrifted compares the fields rollgate manages on the canary Service.
func canaryDrifted(live, want *corev1.Service, rev string) bool {
	if !mapsEqual(live.Spec.Selector, want.Spec.Selector) || live.Labels[rev] != want.Labels[rev] || live.Labels[LabelCanaryOf] != want.Labels[LabelCanaryOf] {
		return true
	}
	return !equality.Semantic.DeepEqual(withoutNodePorts(live.Spec.Ports), withoutNodePorts(want.Spec.Ports))
}

func withoutNodePorts(ports []corev1.ServicePort) []corev1.ServicePort {
	out := make([]corev1.ServicePort, len(ports))
	for i, p := range ports {
		p.NodePort = 0
		out[i] = p
	}
	return out
}

// keepNodePorts keeps the node ports already allocated to ports of the same
// name and port, so an update does not move them.
func keepNodePorts(want, live []corev1.ServicePort) []corev1.ServicePort {
	out := make([]corev1.ServicePort, len(want))
	for i, p := range want {
		for _, l := range live {
			if l.Name == p.Name && l.Port == p.Port && l.Protocol == p.Protocol {
				p.NodePort = l.NodePort
			}
		}
		out[i] = p
	}
	return out
}

// restoreStable writes the declared selector back and removes the
// annotation. It reports whether it changed anything.
func (s *services) restoreStable(ctx context.Context) (bool, error) {
	var changed bool
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		stable := &corev1.Service{}
		if err := s.c.Get(ctx, s.key(s.stable), stable); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("get Service %s/%s: %w", s.ro.Namespace, s.stable, err)
		}
		keys := s.revisionKeys(stable)
		declared := maps.Clone(stable.Spec.Selector)
		for _, k := range keys {
			delete(declared, k)
		}
		if raw, ok := stable.Annotations[v1alpha1.AnnotationOriginal]; ok && narrowedBy(stable, keys) {
			var saved savedSelector
			if err := json.Unmarshal([]byte(raw), &saved); err == nil && len(saved.Selector) > 0 {
				declared = saved.Selector
			}
		}
		var err error
		changed, err = s.writeStable(ctx, stable, declared, "", nil)
		return err
	})
	return changed, err
}

// deleteCanary deletes the canary Service; done once it is gone.
func (s *services) deleteCanary(ctx context.Context) (bool, error) {
	return deleteOwned(ctx, s.c, s.ro, &corev1.Service{}, s.key(s.canaryName()), "Service")
}

// deleteOwned deletes the object at key if ro owns it; done once it is gone
// (or was never ours).
func deleteOwned(ctx context.Context, c client.Client, ro *v1alpha1.Rollout, obj client.Object, key types.NamespacedName, what string) (bool, error) {
	if err := c.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("get %s %s: %w", what, key, err)
	}
	if !ownedBy(obj, ro) {
		return true, nil
	}
	if obj.GetDeletionTimestamp() != nil {
		return false, nil
	}
	uid := obj.GetUID()
	err := c.Delete(ctx, obj, client.Preconditions{UID: &uid})
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("delete %s %s: %w", what, key, err)
	}
	if err := c.Get(ctx, key, obj); apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, nil
}
