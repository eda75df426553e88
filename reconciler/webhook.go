package reconciler

import (
	"cmp"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rollgate/rollgate/reconciler/routehook"
	"github.com/rollgate/rollgate/reconciler/validation"
	"github.com/rollgate/rollgate/reconciler/webhook"
)

// setupWebhook registers the workload admission webhook; its certificate
// and registration are kept current by the webhook package. The hooks read
// Rollouts from rollouts (nil: the manager's cached client); an instance
// scoped to a namespace registers them for that namespace only.
func setupWebhook(mgr ctrl.Manager, opts Options, rollouts client.Reader, scope watchScope) error {
	if rollouts == nil {
		rollouts = mgr.GetClient()
	}
	reg := webhook.Registration{
		Name: cmp.Or(opts.WebhookConfigName, "rollgate"), Namespaces: scope.namespaces(),
		TimeoutSeconds: opts.WebhookTimeoutSeconds,
	}
	if opts.WebhookURL != "" {
		reg.URL = opts.WebhookURL
	} else {
		reg.Service = &webhook.ServiceRef{Namespace: opts.Namespace, Name: opts.WebhookService}
	}
	return webhook.Setup(mgr, webhook.Options{
		Registration:    reg,
		Host:            opts.WebhookHost,
		Port:            opts.WebhookPort,
		SecretNamespace: opts.Namespace,
		SecretName:      opts.WebhookSecret,
		Now:             opts.Now,
		Rollouts:        rollouts,
		Hooks: []webhook.HookHandler{
			validation.TemplateHook(admission.NewDecoder(mgr.GetScheme())),
			validation.RolloutHook(admission.NewDecoder(mgr.GetScheme()), rollouts),
			routehook.Hook(routehook.Options{Reader: rolloutsAndConfig{rollouts: rollouts, Reader: mgr.GetClient()}, Namespace: opts.Namespace, LuaConfigMap: opts.LuaConfigMap}),
		},
	})
}
