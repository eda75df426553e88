package webhook

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/rest"
)

// Configurations are the webhook configurations r registers for hooks
// with bundle, as the controller writes them.
func (r Registration) Configurations(hooks []Hook, bundle []byte) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	return r.configurations(hooks, bundle)
}

// WatchConfigurations runs the controller's watch on the configurations r
// registers for hooks as the user of cfg, calling changed on every event,
// until ctx ends.
func WatchConfigurations(ctx context.Context, cfg *rest.Config, r Registration, hooks []Hook, changed func()) error {
	w, err := newConfigWatch(cfg, nil, r, hooks, changed)
	if err != nil {
		return err
	}
	return w.Start(ctx)
}
