package webhook

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	admissionclient "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// configWatch reports every change to the webhook configurations the
// controller keeps (created, updated, deleted: a `helm upgrade` that
// re-creates them without a CA bundle, a `kubectl edit`), so the Keeper
// puts the CA bundle and hooks back within seconds rather than at its next
// periodic check. It runs on every replica, like the Keeper.
//
// It lists and watches with the field selector metadata.name=<name>, never
// the whole resource: RBAC then authorizes list and watch by name, so the
// ClusterRole can limit them with resourceNames to the one configuration,
// as it limits get and update, and the controller reads no other webhook
// configuration of the cluster. Without that permission the watch logs the
// refusal once and the periodic check still repairs the configurations.
type configWatch struct {
	client admissionclient.AdmissionregistrationV1Interface
	name   string
	// mutating and validating say which configurations exist to watch.
	mutating, validating bool
	// changed is called on every event.
	changed func()
}

// newConfigWatch watches the configurations of reg that hooks make, with
// cfg and httpClient (nil: one made from cfg).
func newConfigWatch(cfg *rest.Config, httpClient *http.Client, reg Registration, hooks []Hook, changed func()) (*configWatch, error) {
	var err error
	if httpClient == nil {
		if httpClient, err = rest.HTTPClientFor(cfg); err != nil {
			return nil, err
		}
	}
	c, err := admissionclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	w := &configWatch{client: c, name: reg.Name, changed: changed}
	for _, h := range hooks {
		w.mutating = w.mutating || h.Mutating
		w.validating = w.validating || !h.Mutating
	}
	return w, nil
}

// NeedLeaderElection is false: every replica keeps the configurations.
func (w *configWatch) NeedLeaderElection() bool { return false }

// Start watches until ctx ends.
func (w *configWatch) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("webhook-configurations").WithValues("name", w.name)
	var informers []cache.SharedIndexInformer
	if w.mutating {
		c := w.client.MutatingWebhookConfigurations()
		informers = append(informers, w.informer(logger, "MutatingWebhookConfiguration",
			&admissionregistrationv1.MutatingWebhookConfiguration{}, listWatch(w.name, c.List, c.Watch)))
	}
	if w.validating {
		c := w.client.ValidatingWebhookConfigurations()
		informers = append(informers, w.informer(logger, "ValidatingWebhookConfiguration",
			&admissionregistrationv1.ValidatingWebhookConfiguration{}, listWatch(w.name, c.List, c.Watch)))
	}
	var wg sync.WaitGroup
	for _, inf := range informers {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	wg.Wait()
	return nil
}

// listWatch lists and watches the one object called name.
func listWatch[L runtime.Object](name string, list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) *cache.ListWatch {
	byName := fields.OneTermEqualSelector("metadata.name", name).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return watchFn(ctx, o)
		},
	}
}

// informer returns an informer of one kind that calls w.changed on every
// event and logs watch errors (a refusal once).
func (w *configWatch) informer(logger logr.Logger, kind string, obj runtime.Object, lw *cache.ListWatch) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformerWithOptions(lw, obj, cache.SharedIndexInformerOptions{ObjectDescription: kind})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.changed() },
		UpdateFunc: func(any, any) { w.changed() },
		DeleteFunc: func(any) { w.changed() },
	})
	var refused sync.Once
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		switch {
		case apierrors.IsForbidden(err):
			refused.Do(func() {
				logger.Error(err, "cannot watch the webhook configuration: the controller needs list and watch on it "+
					"(resourceNames may limit them to this name); until then it is repaired at the periodic check only", "kind", kind)
			})
		case apierrors.IsResourceExpired(err), apierrors.IsGone(err), errors.Is(err, io.EOF), errors.Is(err, context.Canceled):
			logger.V(1).Info("webhook configuration watch restarts", "kind", kind, "reason", err.Error())
		default:
			logger.Error(err, "watch webhook configuration", "kind", kind)
		}
	})
	return inf
}
