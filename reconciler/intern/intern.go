// Package intern keeps one copy of the strings that every cached object
// repeats: its namespace, the keys of its labels and annotations, the
// apiVersion and kind of its owners, its finalizers, and the type, status
// and reason of its conditions. Each object the API server sends is
// decoded into strings of its own, so 10,000 Rollouts' Deployments,
// ReplicaSets, pods and Services hold tens of thousands of copies of
// "app.kubernetes.io/name" and of their namespace's name. The manager's
// cache transforms pass every object through Table.Object after their own
// stripping, so the cache holds one copy of each.
//
// Only strings of few distinct values are kept (never a name, a UID, a
// label's value or a message): a Table's size follows the cluster's
// vocabulary, not its number of objects, and it is bounded anyway
// (Table.max): a full Table is emptied and fills again, which costs a
// second copy of a string, never a wrong one.
package intern

import (
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxLen is the longest string a Table keeps: a label or annotation key
// is at most 317 bytes (a 253-byte prefix, a slash, a 63-byte name), and
// most are under 64.
const maxLen = 128

// DefaultMax is how many strings a Table made by New keeps before it
// empties itself: about 4,096 × 100 bytes at most.
const DefaultMax = 4096

// Table is a set of strings shared by the objects of one cache. It is safe
// for concurrent use: each informer transforms its objects on its own
// goroutine.
type Table struct {
	mu      sync.Mutex
	strings map[string]string
	max     int
	resets  int
}

// New returns an empty Table that keeps at most max strings (DefaultMax
// when max <= 0).
func New(max int) *Table {
	if max <= 0 {
		max = DefaultMax
	}
	return &Table{strings: make(map[string]string), max: max}
}

// Len is how many strings the Table keeps now.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.strings)
}

// Resets is how many times the Table was full and emptied itself.
func (t *Table) Resets() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.resets
}

// String returns the Table's copy of s, keeping s when it has none.
func (t *Table) String(s string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.str(s)
}

func (t *Table) str(s string) string {
	if s == "" || len(s) > maxLen {
		return s
	}
	if c, ok := t.strings[s]; ok {
		return c
	}
	if len(t.strings) >= t.max {
		clear(t.strings)
		t.resets++
	}
	t.strings[s] = s
	return s
}

// keys returns m with its keys replaced by the Table's copies. The map is
// rebuilt (a key of a Go map cannot be replaced in place); the caller's
// map is not changed, so a map shared with another object stays as it is.
func (t *Table) keys(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[t.str(k)] = v
	}
	return out
}

// meta replaces the repeated strings of m by the Table's copies.
func (t *Table) meta(m *metav1.ObjectMeta) {
	m.Namespace = t.str(m.Namespace)
	m.Labels = t.keys(m.Labels)
	m.Annotations = t.keys(m.Annotations)
	if len(m.OwnerReferences) > 0 {
		refs := make([]metav1.OwnerReference, len(m.OwnerReferences))
		copy(refs, m.OwnerReferences)
		for i := range refs {
			refs[i].APIVersion, refs[i].Kind = t.str(refs[i].APIVersion), t.str(refs[i].Kind)
		}
		m.OwnerReferences = refs
	}
	if len(m.Finalizers) > 0 {
		fs := make([]string, len(m.Finalizers))
		for i, f := range m.Finalizers {
			fs[i] = t.str(f)
		}
		m.Finalizers = fs
	}
}

// selector replaces the keys of a label selector by the Table's copies.
func (t *Table) selector(s *metav1.LabelSelector) *metav1.LabelSelector {
	if s == nil {
		return nil
	}
	out := *s
	out.MatchLabels = t.keys(s.MatchLabels)
	if len(s.MatchExpressions) > 0 {
		out.MatchExpressions = make([]metav1.LabelSelectorRequirement, len(s.MatchExpressions))
		copy(out.MatchExpressions, s.MatchExpressions)
		for i := range out.MatchExpressions {
			e := &out.MatchExpressions[i]
			e.Key, e.Operator = t.str(e.Key), metav1.LabelSelectorOperator(t.str(string(e.Operator)))
		}
	}
	return &out
}

// conditioned is a kind of rollgate's own with metav1.Conditions in its
// status: Rollouts and Repositories.
type conditioned interface {
	GetConditions() []metav1.Condition
}

// conditions replaces the type, status and reason of each condition by
// the Table's copies, in place: the slice is the cache's alone (decoded for
// it; no transform before this one shares it).
func (t *Table) conditions(conds []metav1.Condition) {
	for i := range conds {
		c := &conds[i]
		c.Type, c.Reason = t.str(c.Type), t.str(c.Reason)
		c.Status = metav1.ConditionStatus(t.str(string(c.Status)))
	}
}

// Object replaces the repeated strings of obj by the Table's copies: the
// metadata of every object, and the conditions and selectors of the
// built-in kinds rollgate caches in full or in part (Deployments,
// StatefulSets, DaemonSets, ReplicaSets, pods, Services), and the
// conditions of Rollouts and Repositories. It changes obj
// in place, replacing maps and slices rather than writing into them, so a
// map a transform before it shared with the decoded object is never
// changed. An object of another kind keeps all but its metadata as it is.
func (t *Table) Object(obj any) (any, error) {
	m, ok := obj.(metav1.ObjectMetaAccessor)
	if !ok {
		return obj, nil
	}
	om, ok := m.GetObjectMeta().(*metav1.ObjectMeta)
	if !ok {
		return obj, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.meta(om)
	switch o := obj.(type) {
	case *corev1.Pod:
		if len(o.Status.Conditions) > 0 {
			conds := make([]corev1.PodCondition, len(o.Status.Conditions))
			copy(conds, o.Status.Conditions)
			for i := range conds {
				c := &conds[i]
				c.Type, c.Reason = corev1.PodConditionType(t.str(string(c.Type))), t.str(c.Reason)
				c.Status = corev1.ConditionStatus(t.str(string(c.Status)))
			}
			o.Status.Conditions = conds
		}
	case *appsv1.Deployment:
		o.Spec.Selector = t.selector(o.Spec.Selector)
		o.Spec.Template.Labels = t.keys(o.Spec.Template.Labels)
		o.Spec.Template.Annotations = t.keys(o.Spec.Template.Annotations)
		if len(o.Status.Conditions) > 0 {
			conds := make([]appsv1.DeploymentCondition, len(o.Status.Conditions))
			copy(conds, o.Status.Conditions)
			for i := range conds {
				c := &conds[i]
				c.Type, c.Reason = appsv1.DeploymentConditionType(t.str(string(c.Type))), t.str(c.Reason)
				c.Status = corev1.ConditionStatus(t.str(string(c.Status)))
			}
			o.Status.Conditions = conds
		}
	case *appsv1.StatefulSet:
		o.Spec.Selector = t.selector(o.Spec.Selector)
		o.Spec.Template.Labels = t.keys(o.Spec.Template.Labels)
	case *appsv1.DaemonSet:
		o.Spec.Selector = t.selector(o.Spec.Selector)
		o.Spec.Template.Labels = t.keys(o.Spec.Template.Labels)
	case *appsv1.ReplicaSet:
		o.Spec.Selector = t.selector(o.Spec.Selector)
	case *corev1.Service:
		o.Spec.Selector = t.keys(o.Spec.Selector)
	case conditioned:
		t.conditions(o.GetConditions())
	}
	return obj, nil
}
