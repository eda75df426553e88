package metrics_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler"
	"github.com/rollgate/rollgate/reconciler/metrics"
	"github.com/rollgate/rollgate/test/gitserver"
	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// releaseWorld is a kwok cluster with the rollgate controller running
// in-process, its metrics in a registry of the test's own.
type releaseWorld struct {
	t   *testing.T
	c   client.Client
	reg *prometheus.Registry
	git *gitserver.Server
}

func newReleaseWorld(t *testing.T) *releaseWorld {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme, gatewayv1.Install} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cluster := kwok.Start(t, kwok.Options{Nodes: 2, Scheme: scheme})
	if _, err := crenvtest.InstallCRDs(cluster.RESTConfig, crenvtest.CRDInstallOptions{
		Scheme: scheme, Paths: []string{filepath.Join(repo.Root(), "charts", "rollgate", "crds")}, ErrorIfPathMissing: true,
	}); err != nil {
		t.Fatal(err)
	}
	w := &releaseWorld{t: t, c: cluster.Client, reg: prometheus.NewRegistry(), git: gitserver.Start(t, gitserver.Options{})}
	w.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rollgate-system"}})
	m, err := metrics.New(w.reg)
	if err != nil {
		t.Fatal(err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	mgr, err := reconciler.NewManager(cluster.RESTConfig, reconciler.ManagerOptions{
		Logger: zap.New(zap.UseDevMode(true), zap.WriteTo(testLog{t})), Restartable: true,
	}, reconciler.Options{
		Namespace:          "rollgate-system",
		Concurrent:         2,
		WebhookURL:         fmt.Sprintf("https://127.0.0.1:%d", port),
		WebhookSecret:      "rollgate-webhook-cert",
		GitWebhookAddr:     "0",
		GitDefaultInterval: time.Second,
		GitStatusWindow:    time.Second,
		Metrics:            m,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	})
	w.until(time.Minute, "the workload webhook registered and served", func(ctx context.Context) (bool, string) {
		var mw admissionregistrationv1.MutatingWebhookConfiguration
		if err := w.c.Get(ctx, client.ObjectKey{Name: "rollgate"}, &mw); err != nil || len(mw.Webhooks) == 0 || len(mw.Webhooks[0].ClientConfig.CABundle) == 0 {
			return false, fmt.Sprintf("MutatingWebhookConfiguration: %v", err)
		}
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	})
	return w
}

// testLog sends the controller's logs to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (w *releaseWorld) create(obj client.Object) {
	w.t.Helper()
	if err := w.c.Create(context.Background(), obj); err != nil {
		w.t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// until polls cond every 250 ms until it holds, failing with cond's last
// explanation after timeout.
func (w *releaseWorld) until(timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	w.t.Helper()
	var why string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var ok bool
		ok, why = cond(ctx)
		return ok, nil
	})
	if err != nil {
		w.t.Fatalf("%s: not within %s; last seen: %s", what, timeout, why)
	}
}

func (w *releaseWorld) rollout(ns, name string) *v1alpha1.Rollout {
	w.t.Helper()
	ro := &v1alpha1.Rollout{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ro); err != nil {
		w.t.Fatal(err)
	}
	return ro
}

// gauge reads one gauge of the controller's registry; ok is false while
// the series does not exist.
func (w *releaseWorld) gauge(name string, labels map[string]string) (float64, bool) {
	s := series(w.t, w.reg, name, labels)
	if len(s) != 1 {
		return 0, false
	}
	return s[0].value, true
}

// webRollout is the Rollout as Git declares it.
var webRollout = rig.Rollout{Name: "web", Namespace: "shop", WithoutTraffic: true, GitPath: "apps/web/rollout.yaml",
	Steps: []string{`{replicas: 1, pause: {}}`, `{replicas: "100%"}`}}.YAML()

// Given a Deployment covered by a Rollout, declared in Git, whose first
// step is a gate, when its image changes, then the metrics show the
// Rollout Progressing at step 1 of 2 with a gate open; once the approval
// branch is merged in Git, the release counts as completed, with its two
// steps and the gate's wait (seen in Git) observed once, and the Git
// exchanges of the Repository measured; deleting the Rollout removes its
// series.
func TestMetricsOfAReleaseThroughTheController(t *testing.T) {
	w := newReleaseWorld(t)
	const ns = "shop"
	w.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	url, err := w.git.CreateRepo("app", map[string]string{"apps/web/rollout.yaml": webRollout})
	if err != nil {
		t.Fatal(err)
	}
	w.create(&v1alpha1.Repository{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-repo"},
		Spec:       v1alpha1.RepositorySpec{URL: url, Branch: "main", Interval: &metav1.Duration{Duration: time.Second}},
	})
	labels := map[string]string{"app": "web"}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers:  []corev1.Container{{Name: "web", Image: "web:1"}},
				},
			},
		},
	}
	w.create(deploy)
	ro := &v1alpha1.Rollout{}
	if err := yaml.UnmarshalStrict([]byte(webRollout), ro); err != nil {
		t.Fatal(err)
	}
	w.create(ro)
	web := map[string]string{"namespace": ns, "name": "web"}
	phase := func(p string) map[string]string { return map[string]string{"namespace": ns, "name": "web", "phase": p} }
	w.until(time.Minute, "rollgate_rollout_phase Healthy", func(context.Context) (bool, string) {
		v, ok := w.gauge("rollgate_rollout_phase", phase("Healthy"))
		return v == 1, fmt.Sprintf("value %v, present %v; status phase %s", v, ok, w.rollout(ns, "web").Status.Phase)
	})

	// Flux applies a new image: the release stops at the gate of step 1,
	// whose approval branch is pushed.
	if err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if err := w.c.Get(context.Background(), client.ObjectKeyFromObject(deploy), deploy); err != nil {
			return err
		}
		deploy.Spec.Template.Spec.Containers[0].Image = "web:2"
		return w.c.Update(context.Background(), deploy)
	}); err != nil {
		t.Fatal(err)
	}
	w.until(2*time.Minute, "the gate of step 1 waits on an approval branch", func(context.Context) (bool, string) {
		ro = w.rollout(ns, "web")
		a := ro.Status.AwaitingApproval
		return a != nil && a.Branch != "", fmt.Sprintf("status: %s step %d %s, awaiting %+v: %s", ro.Status.Phase, ro.Status.CurrentStepIndex, ro.Status.CurrentStepState, a, ro.Status.Message)
	})
	w.until(10*time.Second, "the gauges of the gate", func(context.Context) (bool, string) {
		progressing, _ := w.gauge("rollgate_rollout_phase", phase("Progressing"))
		healthy, _ := w.gauge("rollgate_rollout_phase", phase("Healthy"))
		step, _ := w.gauge("rollgate_rollout_step", web)
		steps, _ := w.gauge("rollgate_rollout_steps", web)
		since, _ := w.gauge("rollgate_rollout_awaiting_approval_since_timestamp_seconds", web)
		got := fmt.Sprintf("Progressing=%v Healthy=%v step=%v steps=%v since=%v", progressing, healthy, step, steps, since)
		want := fmt.Sprintf("Progressing=1 Healthy=0 step=1 steps=2 since=%v", float64(ro.Status.AwaitingApproval.Since.Unix()))
		return got == want, got + "; want " + want
	})

	// Someone merges the approval branch: the release completes before
	// the GitOps tool applies the merge.
	if _, err := w.git.Merge("app", "main", ro.Status.AwaitingApproval.Branch, "Merge approval of web step 1"); err != nil {
		t.Fatal(err)
	}
	w.until(2*time.Minute, "the release completed", func(context.Context) (bool, string) {
		v, _ := w.gauge("rollgate_releases_total", map[string]string{"namespace": ns, "name": "web", "result": "completed"})
		st := w.rollout(ns, "web").Status
		return v == 1, fmt.Sprintf("releases_total{completed}=%v; status %s step %d %s", v, st.Phase, st.CurrentStepIndex, st.CurrentStepState)
	})
	if n, _ := observations(t, w.reg, "rollgate_approval_wait_seconds", map[string]string{"source": "git"}); n != 1 {
		t.Errorf("approval waits (git) = %d, want 1", n)
	}
	if n, _ := observations(t, w.reg, "rollgate_approval_wait_seconds", nil); n != 1 {
		t.Errorf("approval waits = %d, want 1: the gate was approved once", n)
	}
	if n, _ := observations(t, w.reg, "rollgate_rollout_step_duration_seconds", map[string]string{"namespace": ns, "name": "web", "outcome": "completed"}); n != 2 {
		t.Errorf("completed steps observed = %d, want 2", n)
	}
	if got := len(series(t, w.reg, "rollgate_releases_total", web)); got != 1 {
		t.Errorf("%d release result series, want 1 (completed only)", got)
	}
	for _, op := range []string{"list", "fetch", "push"} {
		repo := map[string]string{"namespace": ns, "repository": "app-repo", "operation": op, "result": "success"}
		if n, _ := observations(t, w.reg, "rollgate_git_operation_duration_seconds", repo); n == 0 {
			t.Errorf("no successful Git %s of Repository %s/app-repo observed", op, ns)
		}
	}
	w.until(10*time.Second, "rollgate_rollout_phase Healthy again", func(context.Context) (bool, string) {
		v, _ := w.gauge("rollgate_rollout_phase", phase("Healthy"))
		_, waiting := w.gauge("rollgate_rollout_awaiting_approval_since_timestamp_seconds", web)
		return v == 1 && !waiting, fmt.Sprintf("Healthy=%v, gate series present %v", v, waiting)
	})
	checkControllerRuntimeLabels(t)
	// The release was moved along by its workload's events and the
	// approval (the spec change that carried it, or nothing: it may have
	// come from Git before the spec changed); every wakeup has a source.
	for _, source := range []string{"Deployment", "ReplicaSet"} {
		if v := value(t, w.reg, "rollgate_rollout_wakeups_total", map[string]string{"source": source}); v < 1 {
			t.Errorf("rollgate_rollout_wakeups_total{source=%q} = %v, want at least 1", source, v)
		}
	}

	// The Rollout is deleted: its series go.
	if err := w.c.Delete(context.Background(), ro); err != nil {
		t.Fatal(err)
	}
	w.until(time.Minute, "the Rollout's series removed", func(ctx context.Context) (bool, string) {
		err := w.c.Get(ctx, client.ObjectKeyFromObject(ro), &v1alpha1.Rollout{})
		left := 0
		for _, name := range []string{"rollgate_rollout_phase", "rollgate_rollout_step", "rollgate_rollout_steps", "rollgate_rollout_canary_weight", "rollgate_releases_total", "rollgate_rollout_step_duration_seconds"} {
			left += len(series(t, w.reg, name, web))
		}
		return apierrors.IsNotFound(err) && left == 0, fmt.Sprintf("get: %v; %d series left", err, left)
	})
}

// checkControllerRuntimeLabels checks the label values the dashboard
// selects controller-runtime's metrics by against what the running
// controller exports: the controller name and the webhook paths.
func checkControllerRuntimeLabels(t *testing.T) {
	t.Helper()
	if s := series(t, ctrlmetrics.Registry, "controller_runtime_reconcile_total", map[string]string{"controller": "rollout"}); len(s) == 0 {
		t.Error(`no controller_runtime_reconcile_total{controller="rollout"}: the dashboard's controller name is wrong`)
	}
	var paths []string
	for _, q := range dashboardQueries(t) {
		for _, m := range regexp.MustCompile(`webhook=~"([^"]+)"`).FindAllStringSubmatch(q, -1) {
			paths = append(paths, strings.Split(m[1], "|")...)
		}
	}
	if len(paths) == 0 {
		t.Fatal("the dashboard selects no webhook path")
	}
	for _, p := range paths {
		if s := series(t, ctrlmetrics.Registry, "controller_runtime_webhook_requests_total", map[string]string{"webhook": p}); len(s) == 0 {
			t.Errorf("no controller_runtime_webhook_requests_total{webhook=%q}: the dashboard's webhook path is wrong", p)
		}
	}
}
