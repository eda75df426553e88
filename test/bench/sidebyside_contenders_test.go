package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// rollgateContender is rollgate's controller as `make image` (and `make
// bench`) builds it, bin/image/rollgate-controller (static, stripped), with
// its production defaults: 4 workers, no client-side rate limit.
type rollgateContender struct{}

func (rollgateContender) name() string { return "rollgate" }

func (rollgateContender) install(f *fleet) {
	f.applyFiles(filepath.Join(repo.Root(), "charts", "rollgate", "crds"))
	f.ensureNamespace("rollgate-system")
}

func (rollgateContender) start(f *fleet, dir string) *controllerProcess {
	f.b.Helper()
	bin, err := repo.LookTool(filepath.Join("image", "rollgate-controller"))
	if err != nil {
		f.b.Fatalf("%v: run 'make bench' or 'make image' (the controller binary of the image)", err)
	}
	ports, err := proc.FreePorts(4)
	if err != nil {
		f.b.Fatal(err)
	}
	metrics, probe, webhook, pprof := ports[0], ports[1], ports[2], ports[3]
	p, err := proc.Start(dir, "rollgate", bin, []string{
		"--pprof-bind-address", fmt.Sprintf("127.0.0.1:%d", pprof),
		"--kubeconfig", f.cluster.Kubeconfig, "--namespace", "rollgate-system",
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", metrics),
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", probe),
		"--webhook-port", strconv.Itoa(webhook), "--webhook-bind-host", "127.0.0.1",
		"--webhook-url", fmt.Sprintf("https://127.0.0.1:%d", webhook),
		"--git-webhook-bind-address", "0",
	}, nil)
	if err != nil {
		f.b.Fatal(err)
	}
	f.waitServing(p, probe, webhook, nil)
	return &controllerProcess{p: p, metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics), pprofURL: fmt.Sprintf("http://127.0.0.1:%d", pprof)}
}

func (rollgateContender) rolloutGVK() schema.GroupVersionKind {
	return v1alpha1.GroupVersion.WithKind("Rollout")
}

// rolloutYAML: step 1 one pod and 20% behind a manual gate, step 2 every
// pod and all traffic, then the release finishes. With nginx its Ingress
// router writes a canary Ingress of the nginx dialect beside the user's.
func (rollgateContender) rolloutYAML(name string, r router) string {
	y := rig.Rollout{Name: name, Namespace: ns, Steps: []string{`{traffic: "20%", replicas: 1, pause: {}}`, `{traffic: "100%", replicas: "100%"}`}}.YAML()
	if r == routerNginx {
		y = swapRouting(y, name)
	}
	return y
}

// swapRouting replaces the gateway entry of a Rollout's trafficRoutings
// with an ingress entry of class nginx naming the workload's Ingress (the
// same field in rollgate's and Kruise's Rollout).
func swapRouting(rollout, name string) string {
	gateway := fmt.Sprintf("gateway: {httpRouteName: %s}", name)
	if !strings.Contains(rollout, gateway) {
		panic("no " + gateway + " in the Rollout")
	}
	return strings.Replace(rollout, gateway, fmt.Sprintf("ingress: {name: %s, classType: nginx}", name), 1)
}

func (rollgateContender) ready(ro, d *unstructured.Unstructured) bool {
	phase, _, _ := unstructured.NestedString(ro.Object, "status", "phase")
	stable, _, _ := unstructured.NestedString(ro.Object, "status", "stableRevision")
	observed, _, _ := unstructured.NestedInt64(ro.Object, "status", "observedGeneration")
	return phase == string(v1alpha1.PhaseHealthy) && stable != "" && observed == ro.GetGeneration() &&
		d != nil && d.GetLabels()[v1alpha1.LabelControlled] != ""
}

func (rollgateContender) gated(ro *unstructured.Unstructured) (string, bool) {
	step, _, _ := unstructured.NestedInt64(ro.Object, "status", "awaitingApproval", "step")
	rev, _, _ := unstructured.NestedString(ro.Object, "status", "awaitingApproval", "revision")
	stable, _, _ := unstructured.NestedString(ro.Object, "status", "stableRevision")
	return rev, step == 1 && rev != "" && rev != stable
}

// passed: at step 2 of revision, or done with it.
func (rollgateContender) passed(ro *unstructured.Unstructured, revision string) bool {
	step, _, _ := unstructured.NestedInt64(ro.Object, "status", "currentStepIndex")
	canary, _, _ := unstructured.NestedString(ro.Object, "status", "canaryRevision")
	stable, _, _ := unstructured.NestedString(ro.Object, "status", "stableRevision")
	return step >= 2 && canary == revision || stable == revision
}

func (rollgateContender) done(ro *unstructured.Unstructured, revision string) bool {
	phase, _, _ := unstructured.NestedString(ro.Object, "status", "phase")
	stable, _, _ := unstructured.NestedString(ro.Object, "status", "stableRevision")
	observed, _, _ := unstructured.NestedInt64(ro.Object, "status", "observedGeneration")
	return phase == string(v1alpha1.PhaseHealthy) && stable == revision && observed == ro.GetGeneration()
}

// approve adds the approval of step 1 to spec.approvals, as `rollgate
// approve` or a merged approval pull request does.
func (rollgateContender) approve(ctx context.Context, c client.Client, name, revision string) error {
	ro := &v1alpha1.Rollout{}
	ro.Namespace, ro.Name = ns, name
	patch := fmt.Appendf(nil, `{"spec":{"approvals":[{"revision":%q,"step":1,"approvedBy":"bench"}]}}`, revision)
	return c.Patch(ctx, ro, client.RawPatch(types.MergePatchType, patch))
}

// Kruise Rollout's names: its namespace (POD_NAMESPACE), the Service its
// webhook configurations name until it rewrites them to a URL, and the
// prefix its kustomization gives the configurations' names.
const (
	kruiseNamespace     = "kruise-rollout"
	kruiseWebhookSvc    = "kruise-rollout-webhook-service"
	kruiseNamePrefix    = "kruise-rollout-"
	kruiseWorkloadLabel = "rollouts.kruise.io/workload-type"
)

var kruiseRolloutGVK = schema.GroupVersionKind{Group: "rollouts.kruise.io", Version: "v1beta1", Kind: "Rollout"}

// kruiseContender is OpenKruise Rollout v0.6.1 (bin/kruiserollout,
// `make tools-bench`, built as rollgate's image binary is) with its
// defaults but one feature gate:
// AdvancedDeployment, without which a Deployment cannot be released in
// place (partition style) and Kruise would need a second, canary
// Deployment.
type kruiseContender struct{}

func (kruiseContender) name() string { return "kruise-rollout" }

// kruiseDir is bin/kruiserollout/crds, where tools-kruiserollout copies
// the CRDs, webhook configurations and CRD patches of the module.
func kruiseDir(f *fleet) string { return f.contenderDir("kruiserollout", "OpenKruise Rollout") }

// install applies Kruise's CRDs with the conversion webhook its
// kustomization patches in (config/crd/patches), its namespace, and its two
// webhook configurations from config/webhook with their objectSelectors
// (patch_manifests.yaml) and the names its kustomization gives them.
func (kruiseContender) install(f *fleet) {
	f.b.Helper()
	dir := kruiseDir(f)
	conversions := map[string]any{}
	patches, _ := filepath.Glob(filepath.Join(dir, "patches", "*.yaml"))
	for _, p := range patches {
		for _, u := range decodeFile(f, p) {
			conv, _, _ := unstructured.NestedMap(u.Object, "spec", "conversion")
			_ = unstructured.SetNestedField(conv, kruiseNamespace, "webhook", "clientConfig", "service", "namespace")
			_ = unstructured.SetNestedField(conv, kruiseWebhookSvc, "webhook", "clientConfig", "service", "name")
			conversions[u.GetName()] = conv
		}
	}
	crdDir := f.b.TempDir()
	crds, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, p := range crds {
		var out []byte
		for _, u := range decodeFile(f, p) {
			if conv, ok := conversions[u.GetName()]; ok {
				_ = unstructured.SetNestedField(u.Object, conv, "spec", "conversion")
			}
			data, err := yaml.Marshal(u.Object)
			if err != nil {
				f.b.Fatal(err)
			}
			out = append(append(out, "---\n"...), data...)
		}
		if err := os.WriteFile(filepath.Join(crdDir, filepath.Base(p)), out, 0o644); err != nil {
			f.b.Fatal(err)
		}
	}
	f.applyFiles(crdDir)
	f.ensureNamespace(kruiseNamespace)

	selectors := map[string]any{}
	for _, u := range decodeFile(f, filepath.Join(dir, "webhook", "patch_manifests.yaml")) {
		hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
		for _, h := range hooks {
			m, _ := h.(map[string]any)
			selectors[fmt.Sprint(m["name"])] = m["objectSelector"]
		}
	}
	for _, u := range decodeFile(f, filepath.Join(dir, "webhook", "manifests.yaml")) {
		u.SetName(kruiseNamePrefix + u.GetName())
		unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
		hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
		for i, h := range hooks {
			m, _ := h.(map[string]any)
			if sel, ok := selectors[fmt.Sprint(m["name"])]; ok {
				m["objectSelector"] = sel
			}
			_ = unstructured.SetNestedField(m, kruiseNamespace, "clientConfig", "service", "namespace")
			_ = unstructured.SetNestedField(m, kruiseWebhookSvc, "clientConfig", "service", "name")
			hooks[i] = m
		}
		_ = unstructured.SetNestedSlice(u.Object, hooks, "webhooks")
		if err := f.c.Patch(context.Background(), u, client.Apply, client.FieldOwner("bench"), client.ForceOwnership); err != nil {
			f.b.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// start runs Kruise as a local process: with WEBHOOK_HOST, WEBHOOK_PORT,
// WEBHOOK_CERT_DIR and POD_NAMESPACE set it serves its webhook on that
// port with a CA of its own and rewrites its webhook configurations (and
// the CRDs' conversion webhook) to https://127.0.0.1:<port>.
func (kruiseContender) start(f *fleet, dir string) *controllerProcess {
	f.b.Helper()
	bin, ports := f.toolAndPorts(filepath.Join("kruiserollout", "kruise-rollout"), "OpenKruise Rollout", 3)
	metrics, probe, webhook := ports[0], ports[1], ports[2]
	// Kruise reads its Lua scripts (the Ingress dialects) from
	// ./lua_configuration, which its image holds in its working directory:
	// it runs in bin/kruiserollout/crds, where make tools-bench copies
	// them, through a shell that changes directory and execs it (the
	// process, its PID and its /proc figures are Kruise's).
	luaDir := kruiseDir(f)
	if _, err := os.Stat(filepath.Join(luaDir, "lua_configuration")); err != nil {
		f.b.Fatalf("%v: %s", err, buildHint("OpenKruise Rollout's Lua scripts"))
	}
	p, err := proc.Start(dir, "kruise-rollout", "/bin/sh", []string{"-c", `cd "$0" && exec "$@"`, luaDir, bin,
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metrics),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probe),
		"--feature-gates=AdvancedDeployment=true",
	}, []string{
		"KUBECONFIG=" + f.cluster.Kubeconfig, "POD_NAMESPACE=" + kruiseNamespace,
		"WEBHOOK_HOST=127.0.0.1", "WEBHOOK_PORT=" + strconv.Itoa(webhook),
		"WEBHOOK_CERT_DIR=" + filepath.Join(dir, "certs"),
	})
	if err != nil {
		f.b.Fatal(err)
	}
	want := fmt.Sprintf("https://127.0.0.1:%d/", webhook)
	f.waitServing(p, probe, webhook, func(ctx context.Context) bool {
		for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: kind})
			if err := f.c.Get(ctx, client.ObjectKey{Name: kruiseNamePrefix + strings.ToLower(strings.TrimSuffix(kind, "WebhookConfiguration")) + "-webhook-configuration"}, u); err != nil {
				return false
			}
			hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
			for _, h := range hooks {
				url, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "url")
				ca, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "caBundle")
				if !strings.HasPrefix(url, want) || ca == "" {
					return false
				}
			}
			if len(hooks) == 0 {
				return false
			}
		}
		return true
	})
	return &controllerProcess{p: p, metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics)}
}

func (kruiseContender) rolloutGVK() schema.GroupVersionKind { return kruiseRolloutGVK }

// rolloutYAML: step 1 one pod and 20% behind a manual gate (no pause
// duration), step 2 every pod; partition style (no extra canary
// Deployment). Step 2 sets no traffic: Kruise's webhook refuses traffic on
// a partition-style step of more than 50% of the replicas
// (--partition-percent-limit); its end of release routes all traffic to
// the stable Service, which then selects only new pods.
func (kruiseContender) rolloutYAML(name string, r router) string {
	y := fmt.Sprintf(`
apiVersion: rollouts.kruise.io/v1beta1
kind: Rollout
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: %[1]s}
  strategy:
    canary:
      enableExtraWorkloadForCanary: false
      steps:
      - {traffic: "20%%", replicas: 1, pause: {}}
      - {replicas: "100%%"}
      trafficRoutings:
      - service: %[1]s
        gracePeriodSeconds: 1
        gateway: {httpRouteName: %[1]s}
`, name, ns)
	if r == routerNginx {
		y = swapRouting(y, name)
	}
	return y
}

func (kruiseContender) ready(ro, d *unstructured.Unstructured) bool {
	phase, _, _ := unstructured.NestedString(ro.Object, "status", "phase")
	observed, _, _ := unstructured.NestedInt64(ro.Object, "status", "observedGeneration")
	return phase == "Healthy" && observed == ro.GetGeneration() && d != nil && d.GetLabels()[kruiseWorkloadLabel] != ""
}

func (kruiseContender) gated(ro *unstructured.Unstructured) (string, bool) {
	step, _, _ := unstructured.NestedInt64(ro.Object, "status", "canaryStatus", "currentStepIndex")
	state, _, _ := unstructured.NestedString(ro.Object, "status", "canaryStatus", "currentStepState")
	rev, _, _ := unstructured.NestedString(ro.Object, "status", "canaryStatus", "canaryRevision")
	return rev, step == 1 && state == "StepPaused"
}

// passed: Kruise's own status at step 2 (its canaryStatus goes when the
// release ends).
func (k kruiseContender) passed(ro *unstructured.Unstructured, revision string) bool {
	step, _, _ := unstructured.NestedInt64(ro.Object, "status", "canaryStatus", "currentStepIndex")
	return step >= 2 || k.done(ro, revision)
}

func (kruiseContender) done(ro *unstructured.Unstructured, _ string) bool {
	phase, _, _ := unstructured.NestedString(ro.Object, "status", "phase")
	conds, _, _ := unstructured.NestedSlice(ro.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Progressing" && m["reason"] == "Completed" {
			return phase == "Healthy"
		}
	}
	return false
}

// approve moves the paused step to StepReady in the Rollout's status, as
// `kubectl-kruise rollout approve` does; only while step 1 is paused (a
// JSON patch whose tests fail otherwise), so an approval sent again never
// lands on a later step.
func (kruiseContender) approve(ctx context.Context, c client.Client, name, _ string) error {
	return patchStatus(ctx, c, kruiseRolloutGVK, name, []byte(`[{"op":"test","path":"/status/canaryStatus/currentStepIndex","value":1},`+
		`{"op":"test","path":"/status/canaryStatus/currentStepState","value":"StepPaused"},`+
		`{"op":"replace","path":"/status/canaryStatus/currentStepState","value":"StepReady"}]`))
}

// patchStatus applies a JSON patch to the status of the fleet's Rollout
// name of kind gvk (a contender's own Rollout kind).
func patchStatus(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, name string, patch []byte) error {
	ro := &unstructured.Unstructured{}
	ro.SetGroupVersionKind(gvk)
	ro.SetNamespace(ns)
	ro.SetName(name)
	return c.Status().Patch(ctx, ro, client.RawPatch(types.JSONPatchType, patch))
}

// waitServing waits until p answers /readyz on probe, accepts connections
// on webhook and (when set) registered holds.
func (f *fleet) waitServing(p *proc.Process, probe, webhook int, registered func(ctx context.Context) bool) {
	f.b.Helper()
	f.poll(time.Minute, p.Name+" serving", func(ctx context.Context) (bool, error) {
		if err := p.Exited(); err != nil {
			return false, err
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", probe))
		if err != nil {
			return false, nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !proc.Listening(fmt.Sprintf("127.0.0.1:%d", webhook)) {
			return false, nil
		}
		return registered == nil || registered(ctx), nil
	})
}

// decodeFile reads every object of a YAML file.
func decodeFile(f *fleet, path string) []*unstructured.Unstructured {
	f.b.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		f.b.Fatal(err)
	}
	out, err := rig.DecodeAll(string(data))
	if err != nil {
		f.b.Fatalf("%s: %v", path, err)
	}
	return out
}

// contenderDir is bin/<tools>/crds, where make tools-bench copies the CRDs
// of contender what.
func (f *fleet) contenderDir(tools, what string) string {
	dir := filepath.Join(repo.Root(), "bin", tools, "crds")
	if _, err := os.Stat(dir); err != nil {
		f.b.Fatalf("%v: %s", err, buildHint(what))
	}
	return dir
}

// buildHint says how to build contender what.
func buildHint(what string) string {
	return fmt.Sprintf("run 'make tools-bench' (%s for the side-by-side benchmark)", what)
}

// toolAndPorts finds a contender's binary, tool under bin/ (what names it
// in the message saying how to build it), and n free loopback ports for
// it.
func (f *fleet) toolAndPorts(tool, what string, n int) (string, []int) {
	f.b.Helper()
	bin, err := repo.LookTool(tool)
	if err != nil {
		f.b.Fatalf("%v: %s", err, buildHint(what))
	}
	ports, err := proc.FreePorts(n)
	if err != nil {
		f.b.Fatal(err)
	}
	return bin, ports
}
