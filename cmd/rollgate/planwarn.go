package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/luascripts"
)

// planWarning is something the API server accepts that will not work as
// written: `plan` prints it on stderr, and fails on it with --strict.
type planWarning struct {
	Source    string `json:"source"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Message   string `json:"message"`
}

func (w planWarning) text() string {
	return fmt.Sprintf("%s %s/%s (%s): %s", w.Kind, w.Namespace, w.Name, w.Source, w.Message)
}

// duplicateRollouts warns of each Rollout declared again with the same
// namespace and name: only one of them can exist in the cluster.
func duplicateRollouts(set *manifestSet) []planWarning {
	var out []planWarning
	first := map[string]string{}
	for _, m := range set.objects {
		gv := m.obj.GroupVersionKind()
		if gv.Group != v1alpha1.GroupVersion.Group || gv.Kind != "Rollout" {
			continue
		}
		key := m.obj.GetNamespace() + "/" + m.obj.GetName()
		if src, ok := first[key]; ok {
			out = append(out, planWarning{Source: m.source, Kind: "Rollout", Namespace: m.obj.GetNamespace(), Name: m.obj.GetName(),
				Message: fmt.Sprintf("declared twice, first at %s: only one of them can exist in the cluster (the plan shows both)", src)})
			continue
		}
		first[key] = m.source
	}
	return out
}

// rolloutWarnings warns of what in one valid Rollout names something that
// is not there: an ingress classType with no built-in script, a workload
// that is not in the files read.
func rolloutWarnings(ro *v1alpha1.Rollout, source string, set *manifestSet, lib *luascripts.Library) []planWarning {
	var out []planWarning
	warn := func(format string, args ...any) {
		out = append(out, planWarning{Source: source, Kind: "Rollout", Namespace: ro.Namespace, Name: ro.Name, Message: fmt.Sprintf(format, args...)})
	}
	for i, r := range ro.Spec.Strategy.TrafficRoutings() {
		if r.Ingress == nil {
			continue
		}
		if _, err := lib.ResolveIngress(r.Ingress.ClassType, nil); errors.Is(err, luascripts.ErrNoScript) {
			warn("trafficRoutings[%d].ingress.classType %q is unknown (built-in: %s): the controller stalls the Rollout (InvalidSpec) when it routes traffic, unless its ConfigMap has the key %q",
				i, r.Ingress.ClassType, strings.Join(ingressClassTypes(lib), ", "), luascripts.IngressKey(r.Ingress.ClassType))
		}
	}
	ref := ro.Spec.WorkloadRef
	if set.find(ref.APIVersion, ref.Kind, ro.Namespace, ref.Name) == nil {
		msg := fmt.Sprintf("spec.workloadRef names %s %s/%s (%s), which is in none of the files read", ref.Kind, ro.Namespace, ref.Name, ref.APIVersion)
		if alike := sameKind(set, ref.Kind, ro.Namespace); len(alike) > 0 {
			msg += fmt.Sprintf("; the %s objects in %s are: %s", ref.Kind, ro.Namespace, strings.Join(alike, ", "))
		}
		warn("%s", msg)
	}
	return out
}

// ingressClassTypes are the ingress class types with a built-in script.
func ingressClassTypes(lib *luascripts.Library) []string {
	prefix := luascripts.IngressKey("")
	var out []string
	for _, k := range lib.BuiltinKeys() {
		if c, ok := strings.CutPrefix(k, prefix); ok {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}

// sameKind names the objects of kind in namespace (a misspelt name is then
// easy to see), with their API version when it is not apps/v1.
func sameKind(set *manifestSet, kind, namespace string) []string {
	var out []string
	for _, m := range set.objects {
		if m.obj.GetKind() != kind || m.obj.GetNamespace() != namespace {
			continue
		}
		name := m.obj.GetName()
		if v := m.obj.GetAPIVersion(); v != "apps/v1" {
			name += " (" + v + ")"
		}
		out = append(out, name)
	}
	return out
}
