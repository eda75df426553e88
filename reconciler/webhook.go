package reconciler

import (
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rollgate/rollgate/reconciler/routehook"
	"github.com/rollgate/rollgate/reconciler/validation"
	"github.com/rollgate/rollgate/reconciler/webhook"
)

// setupWebhook registers the workload admission webhook; its certificate
// and registration are kept current by the webhook package.
func setupWebhook(mgr ctrl.Manager, opts Options) error {
	reg := webhook.Registration{Name: orDefault(opts.WebhookConfigName, "rollgate")}
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
		Hooks: []webhook.HookHandler{
			validation.TemplateHook(admission.NewDecoder(mgr.GetScheme())),
			validation.RolloutHook(admission.NewDecoder(mgr.GetScheme()), mgr.GetClient()),
			routehook.Hook(routehook.Options{Reader: mgr.GetClient(), Namespace: opts.Namespace, LuaConfigMap: opts.LuaConfigMap}),
		},
	})
}
