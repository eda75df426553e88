package reconciler

import (
	"time"

	"github.com/rollgate/rollgate/reconciler/gitsource"
	"github.com/rollgate/rollgate/reconciler/metrics"
	"github.com/rollgate/rollgate/reconciler/rollout"
)

// Options configure the controllers. cmd/rollgate fills them from flags.
type Options struct {
	// Namespace of the controller: Lua ConfigMap, webhook certificate.
	Namespace string
	// NoEndpointSlices routes requests to a canary Service without
	// waiting for its EndpointSlices to list a ready endpoint
	// (traffic.Options.Endpoints): for an API server without an
	// EndpointSlice controller (envtest). A cluster always wants the wait.
	NoEndpointSlices bool
	// Concurrent is the number of Rollouts reconciled in parallel.
	Concurrent int
	// MaxReleasesInFlight is the cluster's budget: at most this many
	// releases in flight at once among every Rollout watched (0: no
	// limit); a budget named "cluster" beside those of the release rules.
	MaxReleasesInFlight int
	// LuaConfigMap names the ConfigMap in Namespace with user Lua scripts.
	LuaConfigMap string
	// WebhookService is the Service in front of the webhook server
	// (in-cluster registration); WebhookURL, when set, is registered instead
	// (a controller running as a local process).
	WebhookService string
	// WebhookURL is the URL to register for the admission webhook.
	WebhookURL string
	// WebhookSecret holds the webhook CA and serving certificate.
	WebhookSecret string
	// WebhookHost and WebhookPort are where the webhook server listens.
	WebhookHost string
	WebhookPort int
	// WebhookConfigName is the MutatingWebhookConfiguration to keep current.
	WebhookConfigName string
	// WebhookTimeoutSeconds is how long the API server waits for every
	// hook, 1 to 30; 0 leaves each hook its own.
	WebhookTimeoutSeconds int32
	// GitWebhookAddr is the listen address of the push-webhook endpoint;
	// "" or "0" disables it.
	GitWebhookAddr string
	// GitDefaultInterval is the fetch interval when a Repository sets none.
	GitDefaultInterval time.Duration
	// GitStatusBranch is the status branch when a Repository sets none.
	GitStatusBranch string
	// GitStatusWindow is the coalescing window when a Repository sets none.
	GitStatusWindow time.Duration
	// GitInsecureHTTP allows credentials over http:// (tests, in-cluster
	// Git servers), and a forge's API (rollout.Options.InsecureHTTP).
	GitInsecureHTTP bool
	// EventsAddr forwards events to Flux's notification-controller.
	EventsAddr string
	// Now reads the clock; nil means time.Now. Tests inject a clock.
	Now func() time.Time
	// Metrics records rollgate's Prometheus metrics; nil records none.
	Metrics *metrics.Metrics

	// lease is the leader election Lease NewManager set up (nil without
	// leader election): the Git status writers' fencing epoch comes from
	// it.
	lease *gitsource.Lease
}

// gitOptions are the options of the Git source (package gitsource).
func (o Options) gitOptions() gitsource.Options {
	return gitsource.Options{
		Concurrent: o.Concurrent, PushAddr: o.GitWebhookAddr, DefaultInterval: o.GitDefaultInterval,
		StatusBranch: o.GitStatusBranch, StatusWindow: o.GitStatusWindow, InsecureHTTP: o.GitInsecureHTTP,
		Now: o.Now, Metrics: o.Metrics, Lease: o.lease,
	}
}

// rolloutOptions are the options of the Rollout controller (package
// rollout).
func (o Options) rolloutOptions() rollout.Options {
	return rollout.Options{
		Namespace: o.Namespace, NoEndpointSlices: o.NoEndpointSlices, Concurrent: o.Concurrent,
		MaxReleasesInFlight: o.MaxReleasesInFlight, LuaConfigMap: o.LuaConfigMap, InsecureHTTP: o.GitInsecureHTTP,
		EventsAddr: o.EventsAddr, Now: o.Now, Metrics: o.Metrics,
	}
}
