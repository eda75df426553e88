package webhook

import (
	"context"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestRegistrationOfANamespacedController: a controller that watches its
// own namespace registers every hook, mutating and validating, for that
// namespace alone, keeping the hook's own namespace selector; without
// Namespaces every namespace is sent.
func TestRegistrationOfANamespacedController(t *testing.T) {
	hooks := []Hook{
		{Name: "workloads.rollgate.dev", Path: "/w", Mutating: true},
		{Name: "rollouts.rollgate.dev", Path: "/r", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}}},
	}
	nsLabels := func(name string, extra map[string]string) labels.Set {
		l := labels.Set{corev1.LabelMetadataName: name}
		for k, v := range extra {
			l[k] = v
		}
		return l
	}
	matches := func(t *testing.T, sel *metav1.LabelSelector, ns labels.Set) bool {
		t.Helper()
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			t.Fatal(err)
		}
		return s.Matches(ns)
	}
	selectors := func(reg Registration) []*metav1.LabelSelector {
		m, v := reg.configurations(hooks, []byte("ca"))
		return []*metav1.LabelSelector{m.Webhooks[0].NamespaceSelector, v.Webhooks[0].NamespaceSelector}
	}
	web := map[string]string{"team": "web"}

	scoped := selectors(Registration{Name: "rollgate-team-a", URL: "https://127.0.0.1:9443", Namespaces: []string{"team-a"}})
	for i, ns := range []labels.Set{nsLabels("team-a", web), nsLabels("team-b", web), nsLabels("team-a-2", web)} {
		want := i == 0
		for _, sel := range scoped {
			if got := matches(t, sel, ns); got != want {
				t.Errorf("scoped to team-a: namespace %v sent = %v, want %v (selector %v)", ns, got, want, sel)
			}
		}
	}
	if matches(t, scoped[1], nsLabels("team-a", nil)) {
		t.Errorf("the validating hook's own selector (team=web) was dropped: %v", scoped[1])
	}

	all := selectors(Registration{Name: "rollgate", URL: "https://127.0.0.1:9443"})
	if !matches(t, all[0], nsLabels("anything", nil)) || !matches(t, all[1], nsLabels("anything", web)) {
		t.Errorf("unscoped: a namespace is not sent: %v, %v", all[0], all[1])
	}
	if len(all[0].MatchExpressions) != 0 {
		t.Errorf("unscoped: want the empty selector the API server stores, got %v", all[0])
	}
}

// TestPublishSaysWhatItPutBack: publish writes only what differs and says
// whether the CA bundle was part of it (a bundle is repaired at once, a
// disagreement over hooks alone is paced).
func TestPublishSaysWhatItPutBack(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	p := &publisher{reader: c, writer: c, reg: Registration{Name: "rollgate", URL: "https://127.0.0.1:9443"},
		hooks: []Hook{WorkloadHook(nil), {Name: "v.rollgate.dev", Path: "/v"}}}
	bundle := []byte("ca")
	step := func(what string, change func(), want published) {
		t.Helper()
		if change != nil {
			change()
		}
		got, err := p.publish(ctx, bundle)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got != want {
			t.Errorf("%s: published %+v, want %+v", what, got, want)
		}
	}
	mutating := func(edit func(*admissionregistrationv1.MutatingWebhookConfiguration)) func() {
		return func() {
			var m admissionregistrationv1.MutatingWebhookConfiguration
			if err := c.Get(ctx, client.ObjectKey{Name: "rollgate"}, &m); err != nil {
				t.Fatal(err)
			}
			edit(&m)
			if err := c.Update(ctx, &m); err != nil {
				t.Fatal(err)
			}
		}
	}
	step("first publish", nil, published{wrote: true, bundle: true})
	step("nothing changed", nil, published{})
	step("match conditions removed", mutating(func(m *admissionregistrationv1.MutatingWebhookConfiguration) {
		m.Webhooks[0].MatchConditions = nil
	}), published{wrote: true})
	step("CA bundle cleared", mutating(func(m *admissionregistrationv1.MutatingWebhookConfiguration) {
		m.Webhooks[0].ClientConfig.CABundle = nil
	}), published{wrote: true, bundle: true})
	step("validating configuration deleted", func() {
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "rollgate"}}
		if err := c.Delete(ctx, v); err != nil {
			t.Fatal(err)
		}
	}, published{wrote: true, bundle: true})
	step("timeout changed", mutating(func(m *admissionregistrationv1.MutatingWebhookConfiguration) {
		m.Webhooks[0].TimeoutSeconds = ptr.To[int32](30)
	}), published{wrote: true})
	step("new CA bundle", func() { bundle = []byte("ca2") }, published{wrote: true, bundle: true})
}

// TestRegistrationTimeout: a registration's timeout replaces every hook's
// (a hook's own included); without one, a hook keeps its own, else 10 s.
// Outside the API server's 1 to 30 s the options are refused.
func TestRegistrationTimeout(t *testing.T) {
	hooks := []Hook{
		{Name: "workloads.rollgate.dev", Path: "/w", Mutating: true},
		{Name: "routes.rollgate.dev", Path: "/r", Mutating: true, TimeoutSeconds: 5},
		{Name: "rollouts.rollgate.dev", Path: "/v"},
	}
	for _, c := range []struct {
		reg  int32
		want []int32
	}{{0, []int32{10, 5, 10}}, {1, []int32{1, 1, 1}}, {30, []int32{30, 30, 30}}} {
		m, v := Registration{Name: "rollgate", URL: "https://127.0.0.1:9443", TimeoutSeconds: c.reg}.configurations(hooks, []byte("ca"))
		got := []int32{*m.Webhooks[0].TimeoutSeconds, *m.Webhooks[1].TimeoutSeconds, *v.Webhooks[0].TimeoutSeconds}
		if !slices.Equal(got, c.want) {
			t.Errorf("registration timeout %d: hooks' timeouts %v, want %v", c.reg, got, c.want)
		}
	}
	for _, s := range []int32{-1, 31} {
		o := Options{Registration: Registration{URL: "https://127.0.0.1:9443", TimeoutSeconds: s}, SecretNamespace: "ns"}
		if err := o.defaults(); err == nil || !strings.Contains(err.Error(), "1 to 30") {
			t.Errorf("registration timeout %d: defaults() = %v, want an error naming 1 to 30", s, err)
		}
	}
}
