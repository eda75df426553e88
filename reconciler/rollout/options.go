package rollout

import (
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/reconciler/metrics"
)

// Options configure the Rollout controller. The controller's
// reconciler.Options fill them.
type Options struct {
	// Namespace is the controller's namespace, where the Lua ConfigMap is.
	Namespace string
	// NoEndpointSlices routes to a canary Service before its
	// EndpointSlices list a ready endpoint: for envtest, which has no
	// EndpointSlice controller.
	NoEndpointSlices bool
	// Concurrent is the number of Rollouts reconciled in parallel.
	Concurrent int
	// MaxReleasesInFlight is the budget named "cluster": the releases in
	// flight at once among every Rollout watched (0: no limit).
	MaxReleasesInFlight int
	// LuaConfigMap names the ConfigMap in Namespace with user Lua scripts.
	LuaConfigMap string
	// InsecureHTTP allows a forge's API over http:// (tests, in-cluster
	// forges).
	InsecureHTTP bool
	// EventsAddr is where events are copied to Flux's
	// notification-controller (package fluxevents).
	EventsAddr string
	// Now reads the clock; nil means time.Now.
	Now func() time.Time
	// Metrics records the Rollout metrics; nil records none.
	Metrics *metrics.Metrics
	// Shard is the label selector of this instance's Rollouts when it is
	// one shard of several, and AllRollouts reads every Rollout (the
	// admission webhooks' view): a lockstep group with a member in
	// another shard is refused. Both nil for an instance that is not a
	// shard.
	Shard       labels.Selector
	AllRollouts client.Reader
}

func (o Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}
