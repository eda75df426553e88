package reconciler

import (
	"net/http"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// newMapper is the manager's REST mapper: controller-runtime's dynamic
// mapper, with the mappings of Kubernetes' built-in kinds kept once found.
//
// controller-runtime's cache of a kind limited to some namespaces (the
// Lua ConfigMap, read once or twice every reconcile) asks the mapper
// whether the kind is namespaced at every Get, and the dynamic mapper
// answers through a chain of mappers that allocates at every question: a
// fifteenth of all the bytes the controller allocated during a release
// (docs/benchmarks.md). A built-in kind's mapping (its resource and its
// scope) is fixed by the API server's code, so it can be kept; every
// other kind (CustomResourceDefinitions, which can be deleted and made
// again with another scope) is asked of the dynamic mapper every time.
func newMapper(cfg *rest.Config, hc *http.Client) (meta.RESTMapper, error) {
	m, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, err
	}
	return &builtinMappings{RESTMapper: m, builtin: clientgoscheme.Scheme.Recognizes}, nil
}

// builtinMappings keeps the mappings of the kinds builtin recognizes.
type builtinMappings struct {
	meta.RESTMapper
	builtin func(schema.GroupVersionKind) bool

	mu   sync.RWMutex
	kept map[schema.GroupVersionKind]*meta.RESTMapping
}

// RESTMapping answers from the kept mappings for a built-in kind asked in
// one version, and keeps what the dynamic mapper finds for one.
func (m *builtinMappings) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if len(versions) != 1 {
		return m.RESTMapper.RESTMapping(gk, versions...)
	}
	gvk := gk.WithVersion(versions[0])
	m.mu.RLock()
	found, ok := m.kept[gvk]
	m.mu.RUnlock()
	if ok {
		return found, nil
	}
	found, err := m.RESTMapper.RESTMapping(gk, versions...)
	if err != nil || !m.builtin(gvk) {
		return found, err
	}
	m.mu.Lock()
	if m.kept == nil {
		m.kept = map[schema.GroupVersionKind]*meta.RESTMapping{}
	}
	m.kept[gvk] = found
	m.mu.Unlock()
	return found, nil
}
