package routehook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/traffic"
)

// held is the step every case records: 20% on the canary.
var held = traffic.Held{Rollout: "web", CanaryWeight: 20, StableService: "web", CanaryService: "web-canary",
	StableRevision: "s1", CanaryRevision: "c2", RevisionLabel: v1alpha1.LabelRevision}

// holding returns meta with the held label and annotation.
func holding(meta metav1.ObjectMeta) metav1.ObjectMeta {
	raw, _ := json.Marshal(held)
	meta = *meta.DeepCopy()
	if meta.Labels == nil {
		meta.Labels = map[string]string{}
	}
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Labels[traffic.LabelHeld] = "true"
	meta.Annotations[traffic.AnnotationHeld] = string(raw)
	return meta
}

var gitMeta = metav1.ObjectMeta{Name: "web", Namespace: "demo", Labels: map[string]string{"team": "web"}}

// gitRoute is the HTTPRoute as Git declares it, with a timeout on its rule.
func gitRoute(timeout string) *gatewayv1.HTTPRoute {
	rule := gatewayv1.HTTPRouteRule{BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
		BackendObjectReference: gatewayv1.BackendObjectReference{Name: "web", Port: ptr.To[gatewayv1.PortNumber](80)},
		Weight:                 ptr.To[int32](1),
	}}}}
	if timeout != "" {
		rule.Timeouts = &gatewayv1.HTTPRouteTimeouts{Request: ptr.To(gatewayv1.Duration(timeout))}
	}
	return &gatewayv1.HTTPRoute{
		TypeMeta:   metav1.TypeMeta{APIVersion: "gateway.networking.k8s.io/v1", Kind: "HTTPRoute"},
		ObjectMeta: *gitMeta.DeepCopy(),
		Spec:       gatewayv1.HTTPRouteSpec{Rules: []gatewayv1.HTTPRouteRule{rule}},
	}
}

// heldRoute is gitRoute as a release at 20% stores it.
func heldRoute(t *testing.T) *gatewayv1.HTTPRoute {
	t.Helper()
	r := gitRoute("")
	r.ObjectMeta = holding(r.ObjectMeta)
	if v, err := traffic.AdmitHTTPRoute(r.DeepCopy(), r); err != nil || v == traffic.NotHeld {
		t.Fatalf("%s %v", v, err)
	}
	return r
}

func request(t *testing.T, kind metav1.GroupVersionKind, manager string, old, obj any) admission.Request {
	t.Helper()
	o, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	n, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	opts, _ := json.Marshal(map[string]string{"fieldManager": manager})
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Update, Kind: kind, Namespace: "demo", Name: "web",
		OldObject: runtime.RawExtension{Raw: o}, Object: runtime.RawExtension{Raw: n},
		Options: runtime.RawExtension{Raw: opts},
	}}
}

// stored decodes into out the object the API server stores for resp.
func stored(t *testing.T, req admission.Request, resp admission.Response, out any) {
	t.Helper()
	if !resp.Allowed {
		t.Fatalf("refused: %v", resp.Result)
	}
	doc := req.Object.Raw
	if len(resp.Patches) > 0 {
		raw, err := json.Marshal(resp.Patches)
		if err != nil {
			t.Fatal(err)
		}
		p, err := jsonpatch.DecodePatch(raw)
		if err != nil {
			t.Fatal(err)
		}
		if doc, err = p.Apply(doc); err != nil {
			t.Fatal(err)
		}
	}
	if err := json.Unmarshal(doc, out); err != nil {
		t.Fatal(err)
	}
}

var (
	routeKind   = metav1.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"}
	serviceKind = metav1.GroupVersionKind{Version: "v1", Kind: "Service"}
	vsKind      = metav1.GroupVersionKind{Group: "networking.istio.io", Version: "v1", Kind: "VirtualService"}
)

func weightsOf(r *gatewayv1.HTTPRoute) string {
	var out []string
	for _, rule := range r.Spec.Rules {
		for _, b := range rule.BackendRefs {
			w, _ := json.Marshal(ptr.Deref(b.Weight, 1))
			out = append(out, string(b.Name)+"="+string(w))
		}
	}
	return strings.Join(out, ",")
}

// TestHTTPRouteWrites: whatever a writer sends, the stored HTTPRoute
// carries the step; what it declares is what the release restores.
func TestHTTPRouteWrites(t *testing.T) {
	h := Hook(Options{}).Handler
	labelOnly := heldRoute(t)
	labelOnly.Labels["team"] = "api"
	tests := []struct {
		name, manager string
		write         *gatewayv1.HTTPRoute
		declared      string // the timeout of the saved declared rule
		warning       bool
	}{
		{name: "a whole-object write of the declared rules", manager: "argocd-controller", write: gitRoute(""), warning: true},
		{name: "a changed rule merged in Git is kept for the end", manager: "kustomize-controller", write: gitRoute("5s"),
			declared: "5s", warning: true},
		{name: "a write that leaves the step's rules", manager: "kubectl-edit", write: labelOnly},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := request(t, routeKind, tc.manager, heldRoute(t), tc.write)
			resp := h.Handle(context.Background(), req)
			var got gatewayv1.HTTPRoute
			stored(t, req, resp, &got)
			if w := weightsOf(&got); w != "web=80,web-canary=20" {
				t.Errorf("stored weights %s, want the step's web=80,web-canary=20", w)
			}
			if got.Labels[traffic.LabelHeld] == "" || got.Annotations[traffic.AnnotationHeld] == "" {
				t.Errorf("the held label or annotation was not kept: %v %v", got.Labels, got.Annotations)
			}
			var saved struct {
				Rules []gatewayv1.HTTPRouteRule `json:"rules"`
			}
			if err := json.Unmarshal([]byte(got.Annotations[v1alpha1.AnnotationOriginal]), &saved); err != nil {
				t.Fatal(err)
			}
			timeout := ""
			if to := saved.Rules[0].Timeouts; to != nil {
				timeout = string(ptr.Deref(to.Request, ""))
			}
			if timeout != tc.declared {
				t.Errorf("declared timeout %q saved, want %q", timeout, tc.declared)
			}
			if (len(resp.Warnings) > 0) != tc.warning {
				t.Errorf("warnings %v, want some: %v", resp.Warnings, tc.warning)
			}
		})
	}
}

// TestOwnWritesPass: rollgate's own writes (ending a release) are stored
// as sent.
func TestOwnWritesPass(t *testing.T) {
	h := Hook(Options{}).Handler
	resp := h.Handle(context.Background(), request(t, routeKind, traffic.DefaultFieldOwner, heldRoute(t), gitRoute("")))
	if !resp.Allowed || len(resp.Patches) > 0 {
		t.Errorf("rollgate's write was changed: %+v", resp)
	}
}

// TestUnexpressibleDeclarationIsRefused: a declaration the step cannot be
// computed on (no rule reaches the stable Service any more) is refused
// with a message saying what to do, never stored as sent.
func TestUnexpressibleDeclarationIsRefused(t *testing.T) {
	h := Hook(Options{}).Handler
	write := gitRoute("")
	write.Spec.Rules[0].BackendRefs[0].Name = "elsewhere"
	resp := h.Handle(context.Background(), request(t, routeKind, "helm", heldRoute(t), write))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "abort the release") {
		t.Errorf("want a refusal naming the way out, got %+v", resp.Result)
	}
}

// TestServiceWrites: the stable Service keeps its narrowed selector.
func TestServiceWrites(t *testing.T) {
	h := Hook(Options{}).Handler
	git := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: *gitMeta.DeepCopy(),
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}}}
	old := git.DeepCopy()
	old.ObjectMeta = holding(old.ObjectMeta)
	if _, err := traffic.AdmitService(old.DeepCopy(), old); err != nil {
		t.Fatal(err)
	}
	req := request(t, serviceKind, "helm", old, git)
	var got corev1.Service
	stored(t, req, h.Handle(context.Background(), req), &got)
	if got.Spec.Selector[v1alpha1.LabelRevision] != "s1" || got.Spec.Selector["app"] != "web" {
		t.Errorf("stored selector %v, want app=web narrowed to revision s1", got.Spec.Selector)
	}
}

// TestVirtualServiceWrites: a custom kind is held through its Lua script.
func TestVirtualServiceWrites(t *testing.T) {
	h := Hook(Options{}).Handler
	git := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
		"metadata": map[string]any{"name": "web", "namespace": "demo"},
		"spec": map[string]any{"hosts": []any{"web"}, "http": []any{map[string]any{
			"route": []any{map[string]any{"destination": map[string]any{"host": "web"}}},
		}}},
	}}
	old := git.DeepCopy()
	meta := holding(metav1.ObjectMeta{})
	old.SetLabels(meta.Labels)
	old.SetAnnotations(meta.Annotations)
	if _, err := traffic.AdmitCustom(context.Background(), traffic.Options{}, old.DeepCopy(), old); err != nil {
		t.Fatal(err)
	}
	req := request(t, vsKind, "argocd-controller", old, git)
	var got unstructured.Unstructured
	stored(t, req, h.Handle(context.Background(), req), &got.Object)
	route, _, _ := unstructured.NestedSlice(got.Object, "spec", "http")
	raw, _ := json.Marshal(route)
	if !strings.Contains(string(raw), `"host":"web-canary"`) || !strings.Contains(string(raw), `"weight":20`) {
		t.Errorf("stored http routes %s, want 20%% on web-canary", raw)
	}
	if got.GetLabels()[traffic.LabelHeld] == "" {
		t.Errorf("the held label was dropped: %v", got.GetLabels())
	}
}

// TestRolloutGoneReleases: an object whose Rollout no longer exists (its
// finalizer removed by hand mid-release) is no longer held: the canary
// Service the step sends requests to is gone with the Rollout.
func TestRolloutGoneReleases(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	none := fake.NewClientBuilder().WithScheme(scheme).Build()
	resp := Hook(Options{Reader: none}).Handler.Handle(context.Background(), request(t, routeKind, "argocd-controller", heldRoute(t), gitRoute("")))
	if !resp.Allowed || len(resp.Patches) > 0 || len(resp.Warnings) == 0 {
		t.Errorf("want the update stored as sent, with a warning: %+v", resp)
	}
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: held.Rollout, Namespace: "demo"}}
	some := fake.NewClientBuilder().WithScheme(scheme).WithObjects(ro).Build()
	resp = Hook(Options{Reader: some}).Handler.Handle(context.Background(), request(t, routeKind, "argocd-controller", heldRoute(t), gitRoute("")))
	if !resp.Allowed || len(resp.Patches) == 0 {
		t.Errorf("want the step put back while the Rollout exists: %+v", resp)
	}
}
