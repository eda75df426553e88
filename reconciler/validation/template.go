package validation

import (
	"context"
	"net/http"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/webhook"
	"github.com/rollgate/rollgate/strategy/verdict"
)

// templatePath is where AnalysisTemplates are validated.
const templatePath = "/validate-rollgate-dev-v1alpha1-analysistemplate"

// templateValidator refuses an AnalysisTemplate whose conditions do not
// compile, whose queries name unknown args, or whose durations make no
// sense, with messages naming the field (CEL cannot be checked by the
// CRD schema).
type templateValidator struct{ decoder admission.Decoder }

func (v *templateValidator) Handle(_ context.Context, req admission.Request) admission.Response {
	var t v1alpha1.AnalysisTemplate
	if err := v.decoder.Decode(req, &t); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if errs := verdict.ValidateTemplate(&t); len(errs) > 0 {
		return admission.Denied(errs.ToAggregate().Error())
	}
	return admission.Allowed("")
}

// TemplateHook returns the AnalysisTemplate validating webhook.
func TemplateHook(d admission.Decoder) webhook.HookHandler {
	return webhook.HookHandler{
		Hook: webhook.Hook{
			Name: "analysistemplates.rollgate.dev",
			Path: templatePath,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{v1alpha1.GroupVersion.Version},
					Resources: []string{"analysistemplates"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			MatchConditions: specConditions(),
			FailurePolicy:   admissionregistrationv1.Fail,
		},
		Handler: &templateValidator{decoder: d},
	}
}
