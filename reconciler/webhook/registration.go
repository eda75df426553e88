package webhook

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Registration says how API servers reach the webhook server: through a
// Service (in-cluster) or a URL (a controller running outside the
// cluster, e.g. on loopback next to a kwok cluster). Exactly one of
// Service and URL is set.
type Registration struct {
	// Name of the MutatingWebhookConfiguration (and the
	// ValidatingWebhookConfiguration, when a validating hook exists) the
	// controller creates and keeps up to date. Default "rollgate".
	Name string
	// Service in front of the controller's webhook port.
	Service *ServiceRef
	// URL is the base URL of the webhook server, such as
	// https://127.0.0.1:9443; hook paths are appended.
	URL string
	// Namespaces, when set, are the only namespaces whose requests the
	// API server sends to every hook (a controller that watches its own
	// namespace only): each hook's namespaceSelector also requires
	// kubernetes.io/metadata.name to be one of them.
	Namespaces []string
	// TimeoutSeconds is how long the API server waits for every hook
	// before it applies the hook's failure policy, 1 to 30 (the API
	// server's range); 0 leaves each hook its own (Hook.TimeoutSeconds).
	// The configurations are kept with it, so a render that writes
	// another value is put back.
	TimeoutSeconds int32
}

// Allowed range of TimeoutSeconds, as the API server validates it.
const (
	MinTimeoutSeconds = 1
	MaxTimeoutSeconds = 30
)

// ServiceRef names the Service in front of the webhook server.
type ServiceRef struct {
	Namespace string
	Name      string
	// Port of the Service; default 443.
	Port int32
}

// Hook is one admission webhook served by the controller.
type Hook struct {
	// Name is the webhook's name in its configuration, a DNS name such as
	// workloads.rollgate.dev.
	Name string
	// Path on the webhook server, such as /mutate-workloads.
	Path string
	// Mutating puts the hook in the MutatingWebhookConfiguration, else in
	// the ValidatingWebhookConfiguration.
	Mutating bool
	// Rules say which requests are sent.
	Rules []admissionregistrationv1.RuleWithOperations
	// ObjectSelector and NamespaceSelector narrow the requests sent.
	ObjectSelector    *metav1.LabelSelector
	NamespaceSelector *metav1.LabelSelector
	// MatchConditions narrow them further: CEL expressions over the
	// request, all of which must be true for the API server to call the
	// hook. A request they skip is admitted as if the hook had allowed it,
	// whether or not the hook answers, so they decide what an outage
	// refuses: leave out only what the handler would pass unchanged.
	MatchConditions []admissionregistrationv1.MatchCondition
	// FailurePolicy; default Fail.
	FailurePolicy admissionregistrationv1.FailurePolicyType
	// TimeoutSeconds; default 10. Registration.TimeoutSeconds, when set,
	// replaces it.
	TimeoutSeconds int32
}

// hosts returns the names the serving certificate must cover.
func (r Registration) hosts() ([]string, error) {
	if r.Service != nil {
		s := r.Service
		base := s.Name + "." + s.Namespace
		return []string{base + ".svc", base + ".svc.cluster.local", base, s.Name}, nil
	}
	u, err := url.Parse(r.URL)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return nil, fmt.Errorf("webhook URL %q: must be https://host:port", r.URL)
	}
	h := u.Hostname()
	if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
		return []string{h, "localhost"}, nil
	}
	return []string{h}, nil
}

// clientConfig returns how the API server calls path.
func (r Registration) clientConfig(path string, bundle []byte) admissionregistrationv1.WebhookClientConfig {
	cc := admissionregistrationv1.WebhookClientConfig{CABundle: bundle}
	if s := r.Service; s != nil {
		cc.Service = &admissionregistrationv1.ServiceReference{
			Namespace: s.Namespace, Name: s.Name, Path: ptr.To(path), Port: ptr.To(s.Port),
		}
		return cc
	}
	cc.URL = ptr.To(strings.TrimSuffix(r.URL, "/") + path)
	return cc
}

// configurations builds the webhook configurations of hooks.
func (r Registration) configurations(hooks []Hook, bundle []byte) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	var mutating []admissionregistrationv1.MutatingWebhook
	var validating []admissionregistrationv1.ValidatingWebhook
	for _, h := range hooks {
		policy := h.FailurePolicy
		if policy == "" {
			policy = admissionregistrationv1.Fail
		}
		timeout := cmp.Or(r.TimeoutSeconds, h.TimeoutSeconds, 10)
		cc := r.clientConfig(h.Path, bundle)
		nsSel := r.namespaceSelector(h.NamespaceSelector)
		none := admissionregistrationv1.SideEffectClassNone
		if h.Mutating {
			mutating = append(mutating, admissionregistrationv1.MutatingWebhook{
				Name: h.Name, ClientConfig: cc, Rules: h.Rules, FailurePolicy: &policy,
				MatchPolicy: ptr.To(admissionregistrationv1.Equivalent), SideEffects: &none,
				ObjectSelector: selectorOrAll(h.ObjectSelector), NamespaceSelector: nsSel,
				MatchConditions: slices.Clone(h.MatchConditions),
				TimeoutSeconds:  ptr.To(timeout), AdmissionReviewVersions: []string{"v1"},
				ReinvocationPolicy: ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			})
			continue
		}
		validating = append(validating, admissionregistrationv1.ValidatingWebhook{
			Name: h.Name, ClientConfig: cc, Rules: h.Rules, FailurePolicy: &policy,
			MatchPolicy: ptr.To(admissionregistrationv1.Equivalent), SideEffects: &none,
			ObjectSelector: selectorOrAll(h.ObjectSelector), NamespaceSelector: nsSel,
			MatchConditions: slices.Clone(h.MatchConditions),
			TimeoutSeconds:  ptr.To(timeout), AdmissionReviewVersions: []string{"v1"},
		})
	}
	meta := metav1.ObjectMeta{Name: r.Name, Labels: map[string]string{"app.kubernetes.io/managed-by": "rollgate"}}
	var m *admissionregistrationv1.MutatingWebhookConfiguration
	var v *admissionregistrationv1.ValidatingWebhookConfiguration
	if len(mutating) > 0 {
		m = &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: meta, Webhooks: mutating}
	}
	if len(validating) > 0 {
		v = &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: *meta.DeepCopy(), Webhooks: validating}
	}
	return m, v
}

// namespaceSelector is a hook's own namespace selector s narrowed to
// r.Namespaces (the label the API server sets on every namespace).
func (r Registration) namespaceSelector(s *metav1.LabelSelector) *metav1.LabelSelector {
	out := selectorOrAll(s).DeepCopy()
	if len(r.Namespaces) > 0 {
		out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: slices.Clone(r.Namespaces),
		})
	}
	return out
}

// selectorOrAll returns s, or the empty selector (everything) the API
// server defaults to, so comparisons with the stored object hold.
func selectorOrAll(s *metav1.LabelSelector) *metav1.LabelSelector {
	if s == nil {
		return &metav1.LabelSelector{}
	}
	return s
}

// publisher writes the webhook configurations with a CA bundle.
type publisher struct {
	reader client.Reader
	writer client.Client
	reg    Registration
	hooks  []Hook
}

// published says what publish wrote.
type published struct {
	// wrote: a configuration was created or updated.
	wrote bool
	// bundle: the CA bundle was among what it put back (a configuration
	// created, or one whose webhooks did not all carry the bundle).
	bundle bool
}

// or is what p and q wrote together.
func (p published) or(q published) published {
	return published{wrote: p.wrote || q.wrote, bundle: p.bundle || q.bundle}
}

// publish creates or updates the configurations so that they carry hooks
// and bundle, and says what it wrote. The comparison with the stored
// configurations covers every field configurations sets (matchConditions
// included), so a pass that finds them current writes nothing: that keeps
// the watch on the configurations from seeing its own writes as changes
// forever.
func (p *publisher) publish(ctx context.Context, bundle []byte) (published, error) {
	m, v := p.reg.configurations(p.hooks, bundle)
	var out published
	if m != nil {
		cur := &admissionregistrationv1.MutatingWebhookConfiguration{}
		w, err := p.ensure(ctx, cur, m, func() (bool, bool) {
			same := equality.Semantic.DeepEqual(cur.Webhooks, m.Webhooks)
			hasBundle := len(cur.Webhooks) > 0
			for _, h := range cur.Webhooks {
				hasBundle = hasBundle && bytes.Equal(h.ClientConfig.CABundle, bundle)
			}
			cur.Webhooks = m.Webhooks
			return same, hasBundle
		})
		if out = out.or(w); err != nil {
			return out, err
		}
	}
	if v != nil {
		cur := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		w, err := p.ensure(ctx, cur, v, func() (bool, bool) {
			same := equality.Semantic.DeepEqual(cur.Webhooks, v.Webhooks)
			hasBundle := len(cur.Webhooks) > 0
			for _, h := range cur.Webhooks {
				hasBundle = hasBundle && bytes.Equal(h.ClientConfig.CABundle, bundle)
			}
			cur.Webhooks = v.Webhooks
			return same, hasBundle
		})
		return out.or(w), err
	}
	return out, nil
}

// ensure creates want, or updates cur (read into by name) when merge
// reports a difference (and whether cur had the CA bundle).
func (p *publisher) ensure(ctx context.Context, cur, want client.Object, merge func() (same, hadBundle bool)) (published, error) {
	err := p.reader.Get(ctx, client.ObjectKeyFromObject(want), cur)
	if apierrors.IsNotFound(err) {
		if err := p.writer.Create(ctx, want); err != nil {
			return published{}, fmt.Errorf("create %T %s: %w", want, want.GetName(), err)
		}
		return published{wrote: true, bundle: true}, nil
	}
	if err != nil {
		return published{}, fmt.Errorf("get %T %s: %w", want, want.GetName(), err)
	}
	same, hadBundle := merge()
	if same {
		return published{}, nil
	}
	if err := p.writer.Update(ctx, cur); err != nil {
		return published{}, fmt.Errorf("update %T %s: %w", cur, cur.GetName(), err)
	}
	return published{wrote: true, bundle: !hadBundle}, nil
}
