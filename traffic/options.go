package traffic

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/luascripts"
)

// DefaultFieldOwner is the field manager rollgate writes with.
const DefaultFieldOwner = "rollgate"

// Options configure the routers New builds. The zero value works.
type Options struct {
	// LuaOverrides are the data of the controller's ConfigMap. Keys
	// lua.traffic.routing.ingress.<classType> and
	// lua.traffic.routing.<Kind>.<group> replace the built-in scripts.
	LuaOverrides map[string]string
	// Lua bounds each script run; zero fields take luascripts' defaults.
	Lua luascripts.Limits
	// LuaObserve, when set, is told about every script run (metrics).
	LuaObserve luascripts.ObserveFunc
	// Scripts resolves and caches compiled scripts. Share one Library
	// between reconciles; nil makes a new one per router (built-in scripts
	// are then compiled on every call).
	Scripts *luascripts.Library
	// RevisionLabel is the pod label that tells the revisions apart;
	// empty means v1alpha1.LabelRevision. A reconciler that narrows by
	// pod-template-hash passes that key here.
	RevisionLabel string
	// FieldOwner is the field manager of rollgate's writes; empty means
	// DefaultFieldOwner.
	FieldOwner string
	// Now reads the clock (grace periods); nil means time.Now.
	Now func() time.Time
	// Endpoints, when set, reads the canary Service's EndpointSlices
	// before routes send it requests: they wait until one of its
	// endpoints is ready there (see services.endpointsReady). Pods
	// reported ready reach a Service's EndpointSlices only after the
	// EndpointSlice controller has run, and a gateway routing to a
	// Service whose slices list no ready endpoint answers 503. The
	// controller passes its cache, which holds the slices of canary
	// Services alone (they carry LabelCanaryOf, copied from the canary
	// Service by the EndpointSlice controller). nil means
	// no such wait, for a cluster without an EndpointSlice controller (a
	// bare API server in tests).
	Endpoints client.Reader
	// Reached, when set, remembers the steps whose routes are in place
	// without a grace period, so that Endpoints is read once per step
	// (see Reached). Share one between reconciles.
	Reached *Reached
}

func (o Options) revisionLabel() string {
	if o.RevisionLabel == "" {
		return v1alpha1.LabelRevision
	}
	return o.RevisionLabel
}

func (o Options) fieldOwner() client.FieldOwner {
	if o.FieldOwner == "" {
		return DefaultFieldOwner
	}
	return client.FieldOwner(o.FieldOwner)
}

func (o Options) now() time.Time {
	if o.Now == nil {
		return time.Now()
	}
	return o.Now()
}
