package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/cmd/internal/dashboard"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/envtest"
	"github.com/rollgate/rollgate/test/rig"
)

// dashboardPage is the JSON of /api/rollouts.
type dashboardPage struct {
	Source    string              `json:"source"`
	Namespace string              `json:"namespace"`
	Rollouts  []dashboard.Rollout `json:"rollouts"`
}

// serveDashboardFlags starts the handler `rollgate dashboard` builds from f.
func serveDashboardFlags(t *testing.T, f dashboardFlags) *httptest.Server {
	t.Helper()
	if f.listen == "" {
		f.listen = "127.0.0.1:0"
	}
	if f.git.timeout == 0 {
		f.git.timeout = time.Minute
	}
	if f.git.statusBranch == "" {
		f.git.statusBranch = gitsync.DefaultStatusBranch
	}
	h, _, err := f.handler()
	if err != nil {
		t.Fatalf("dashboard handler: %v", err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// fetch GETs path and returns the status code and body.
func fetch(t *testing.T, srv *httptest.Server, method, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func mustContain(t *testing.T, what, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, body)
		}
	}
}

func mustNotContain(t *testing.T, what, body string, unwanted ...string) {
	t.Helper()
	for _, w := range unwanted {
		if strings.Contains(body, w) {
			t.Errorf("%s holds %q:\n%s", what, w, body)
		}
	}
}

// verbRecorder is a plain-HTTP proxy in front of the API server that
// records the method of every request passing through it.
type verbRecorder struct {
	mu    sync.Mutex
	verbs map[string]int
}

func (v *verbRecorder) start(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = rt
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.mu.Lock()
		v.verbs[r.Method+" "+r.URL.Path]++
		v.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return writeKubeconfig(t, &rest.Config{Host: srv.URL})
}

// TestDashboardCluster: against a real API server, one Rollout waits at
// the gate of step 2 with 20% of the traffic, another was rolled back;
// the page and /api/rollouts show step, gate, pull request, traffic shares
// and analysis, and the dashboard sends the API server GET requests only.
// A user allowed to read one namespace gets 403 for another.
func TestDashboardCluster(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	env, err := envtest.New(envtest.WithScheme(scheme))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	c := env.Client
	ctx := context.Background()
	for _, ns := range []string{"shop", "vault"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	now := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	createRollout(t, c, "shop", "web", v1alpha1.RolloutStatus{
		Phase: v1alpha1.PhaseProgressing, StableRevision: "web-6d4f", CanaryRevision: "web-7b9c", Attempt: 1,
		CurrentStepIndex: 2, StepCount: 4, CurrentStepState: v1alpha1.StepPaused,
		StableReplicas: 8, StableReadyReplicas: 8, CanaryReplicas: 2, CanaryReadyReplicas: 2, CanaryWeight: 20, Traffic: "20%",
		Message: `waiting for approval <script>alert("x")</script>`,
		AwaitingApproval: &v1alpha1.ApprovalRequest{Revision: "web-7b9c", Step: 2, Since: now,
			Branch: "rollgate/approve/shop/web/web-7b9c-step-2", PullRequestURL: "https://git.example/shop/app/pull/7"},
		Analysis: []v1alpha1.MetricResult{{Template: "http", Metric: "success-rate", Step: 1, Phase: "Successful", Successful: 3,
			Measurements: []v1alpha1.Measurement{{Phase: "Successful", Value: "0.997", At: now}}}},
		Conditions: []metav1.Condition{{Type: "AwaitingApproval", Status: metav1.ConditionTrue, Reason: "GateWaiting",
			Message: "merge the pull request", LastTransitionTime: now}},
	})
	createRollout(t, c, "shop", "api", v1alpha1.RolloutStatus{
		Phase: v1alpha1.PhaseFailed, StableRevision: "api-1", CanaryRevision: "api-2", Attempt: 1,
		CurrentStepIndex: 1, StepCount: 3, CurrentStepState: v1alpha1.StepRolledBack,
		StableReplicas: 4, StableReadyReplicas: 4, Message: "error-rate 0.2 > 0.05: rolled back",
		Analysis: []v1alpha1.MetricResult{{Template: "http", Metric: "error-rate", Step: 1, Phase: "Failed", Failed: 2,
			Measurements: []v1alpha1.Measurement{{Phase: "Failed", Value: "0.2", At: now}}}},
		Git: &v1alpha1.GitStatus{RevertBranch: "rollgate/revert/shop/api/api-2"},
	})
	createRollout(t, c, "vault", "keys", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, StableRevision: "keys-1", StepCount: 2, CurrentStepIndex: 2})

	t.Run("mid-release and rolled back, GET only", func(t *testing.T) {
		rec := &verbRecorder{verbs: map[string]int{}}
		kc := rec.start(t, env.Config)
		srv := serveDashboardFlags(t, dashboardFlags{cluster: clusterFlags{kubeconfig: kc, namespace: "shop"}, refresh: 5 * time.Second})

		start := time.Now()
		code, body := fetch(t, srv, "GET", "/")
		t.Logf("GET / from the cluster: %s", time.Since(start))
		if code != 200 {
			t.Fatalf("GET /: %d\n%s", code, body)
		}
		mustContain(t, "the page", body,
			`<meta http-equiv="refresh" content="5">`,
			`<a href="/rollouts/shop/web">shop/web</a>`, `<td class="step">2/4</td>`, "StepPaused",
			"<td>web-6d4f</td><td>80% traffic</td><td>8/8 pods ready</td>",
			"<td>web-7b9c</td><td>20% traffic</td><td>2/2 pods ready</td>",
			`Waiting at the gate of step 2`, `<a href="https://git.example/shop/app/pull/7">`,
			"<code>rollgate/approve/shop/web/web-7b9c-step-2</code>",
			"<td>http/success-rate</td><td>1</td><td class=\"Successful\">Successful</td><td>0.997</td>",
			"&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;",
			`<a href="/rollouts/shop/api">shop/api</a>`, `<td class="step">1/3</td>`, "RolledBack",
			"<td>api-1</td><td>100% traffic</td>", "<td>api-2</td><td>0% traffic</td>",
			"<code>rollgate/revert/shop/api/api-2</code>", "error-rate 0.2 &gt; 0.05: rolled back")
		mustNotContain(t, "the page", body, "<script>", "vault/keys")

		code, body = fetch(t, srv, "GET", "/api/rollouts")
		var p dashboardPage
		if code != 200 || json.Unmarshal([]byte(body), &p) != nil || len(p.Rollouts) != 2 {
			t.Fatalf("GET /api/rollouts: %d\n%s", code, body)
		}
		api, web := p.Rollouts[0], p.Rollouts[1]
		if web.Step != 2 || web.Steps != 4 || web.Gate == nil || web.Gate.PullRequestURL != "https://git.example/shop/app/pull/7" ||
			web.Gate.Branch != "rollgate/approve/shop/web/web-7b9c-step-2" || web.Stable.Weight != 80 || web.Canary.Weight != 20 ||
			len(web.Analysis) != 1 || web.Analysis[0].Value != "0.997" {
			t.Errorf("web in JSON: %+v", web)
		}
		if api.State != "RolledBack" || api.Phase != "Failed" || api.Stable.Weight != 100 || api.Gate != nil || api.RevertBranch == "" {
			t.Errorf("api in JSON: %+v", api)
		}

		if code, body = fetch(t, srv, "GET", "/rollouts/shop/web"); code != 200 || !strings.Contains(body, `<td class="step">2/4</td>`) || strings.Contains(body, "shop/api") {
			t.Errorf("GET /rollouts/shop/web: %d\n%s", code, body)
		}
		var one dashboard.Rollout
		if code, body = fetch(t, srv, "GET", "/api/rollouts/shop/web"); code != 200 || json.Unmarshal([]byte(body), &one) != nil || one.Canary.Weight != 20 {
			t.Errorf("GET /api/rollouts/shop/web: %d\n%s", code, body)
		}
		if code, body = fetch(t, srv, "GET", "/api/rollouts/shop/missing"); code != 404 || !strings.Contains(body, `"error": "not found: `) {
			t.Errorf("GET of a missing Rollout: %d\n%s", code, body)
		}
		if code, _ = fetch(t, srv, "POST", "/api/rollouts/shop/web"); code != http.StatusMethodNotAllowed {
			t.Errorf("POST: %d, want 405", code)
		}
		req, _ := http.NewRequest("GET", srv.URL+"/", nil)
		req.Host = "rebind.example:8090"
		if resp, err := srv.Client().Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("GET with Host rebind.example: %v %v, want 421", resp, err)
		}

		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.verbs) == 0 {
			t.Fatal("no request reached the API server through the recorder")
		}
		for verb, n := range rec.verbs {
			if !strings.HasPrefix(verb, "GET ") {
				t.Errorf("the dashboard sent %s (%d times): it must only read", verb, n)
			}
		}
		t.Logf("requests to the API server: %v", rec.verbs)
	})

	t.Run("a user allowed one namespace gets 403 for another", func(t *testing.T) {
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "rollout-reader"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"rollouts"}, Verbs: []string{"get", "list", "watch"}}}}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "alice"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "rollout-reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}
		for _, o := range []client.Object{role, binding} {
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		alice, err := env.Environment.AddUser(crenvtest.User{Name: "alice"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		srv := serveDashboardFlags(t, dashboardFlags{cluster: clusterFlags{kubeconfig: writeKubeconfig(t, alice.Config()), namespace: "shop"}})

		// The RoleBinding takes effect through the API server's informer:
		// wait for the first allowed read.
		var code int
		var body string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if code, body = fetch(t, srv, "GET", "/"); code == 200 {
				break
			}
		}
		if code != 200 || !strings.Contains(body, "shop/web") {
			t.Fatalf("alice's GET / in shop: %d\n%s", code, body)
		}
		code, body = fetch(t, srv, "GET", "/rollouts/vault/keys")
		mustContain(t, "alice's page of vault/keys", body, "403 Forbidden", "may not read this (the API server answered 403 Forbidden)",
			`User &#34;alice&#34; cannot get resource &#34;rollouts&#34;`, `in the namespace &#34;vault&#34;`)
		if code != 403 {
			t.Errorf("alice's GET /rollouts/vault/keys: %d, want 403", code)
		}
		code, body = fetch(t, srv, "GET", "/api/rollouts?namespace=vault")
		if code != 403 || !strings.Contains(body, `cannot list resource \"rollouts\"`) {
			t.Errorf("alice's GET /api/rollouts?namespace=vault: %d\n%s", code, body)
		}
		if code, body = fetch(t, srv, "GET", "/api/rollouts?namespace="); code != 403 {
			t.Errorf("alice's list of every namespace: %d, want 403\n%s", code, body)
		}
	})
}

func createRollout(t *testing.T, c client.Client, ns, name string, status v1alpha1.RolloutStatus) {
	t.Helper()
	ctx := context.Background()
	ro := &v1alpha1.Rollout{}
	if err := yaml.Unmarshal([]byte(`
spec:
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: `+name+`}
  strategy: {canary: {steps: [{replicas: 1, pause: {}}, {replicas: "100%"}]}}
`), ro); err != nil {
		t.Fatal(err)
	}
	ro.Namespace, ro.Name = ns, name
	if err := c.Create(ctx, ro); err != nil {
		t.Fatalf("create %s/%s: %v", ns, name, err)
	}
	ro.Status = status
	if err := c.Status().Update(ctx, ro); err != nil {
		t.Fatalf("status of %s/%s: %v", ns, name, err)
	}
}

// TestDashboardGit: the status branch, written by gitsync's Writer, holds
// a released, a rolled-back and a waiting release of shop/web; the page
// from --repo alone shows the waiting gate, the traffic shares and the
// past releases, without the URL's userinfo.
func TestDashboardGit(t *testing.T) {
	at := func(h int) time.Time { return time.Date(2026, 3, 1, 12+h, 0, 0, 0, time.UTC) }
	state := func(h int, phase, stable, canary string, step int, stepState string, canaryWeight int32) gitsync.StatusVersion {
		return gitsync.StatusVersion{Time: at(h), State: gitsync.RolloutState{Namespace: "shop", Name: "web", Phase: phase,
			Step:               gitsync.StepState{Current: step, Total: 3, State: stepState},
			Stable:             gitsync.VersionState{Revision: stable, TrafficPercent: 100 - canaryWeight, Replicas: 9, ReadyReplicas: 9},
			Canary:             gitsync.VersionState{Revision: canary, TrafficPercent: canaryWeight, Replicas: 1, ReadyReplicas: 1, Images: []string{"web=web:" + canary}},
			LastTransitionTime: at(h)}}
	}
	versions := []gitsync.StatusVersion{
		state(1, "Progressing", "s0", "a1", 1, "StepUpgrade", 10),
		state(2, "Healthy", "a1", "a1", 3, "Completed", 0),
		state(3, "Progressing", "a1", "b2", 1, "StepUpgrade", 10),
		state(4, "Failed", "a1", "b2", 1, "RolledBack", 0),
		state(5, "Progressing", "a1", "c3", 2, "StepPaused", 30),
	}
	last := &versions[4].State
	last.AwaitingApproval = &gitsync.AwaitingApproval{Revision: "c3", Step: 2, Since: at(5),
		Branch: gitsync.ApprovalBranch("shop", "web", gitsync.Approval{Revision: "c3", Step: 2})}
	last.Analysis = []gitsync.Measurement{{Name: "success-rate", Phase: "Successful", Value: "0.999", Time: at(5)}}
	repoURL, git := writeStatusHistoryOn(t, versions)
	withToken := strings.Replace(repoURL, "http://", "http://dash-s3cret-token@", 1)

	srv := serveDashboardFlags(t, dashboardFlags{git: gitFlags{repo: withToken}})
	start := time.Now()
	adverts, packs := git.Fetches()
	code, body := fetch(t, srv, "GET", "/")
	a1, p1 := git.Fetches()
	t.Logf("first GET / from Git: %s, %d reads of the branch heads, %d packs", time.Since(start), a1-adverts, p1-packs)
	if code != 200 {
		t.Fatalf("GET /: %d\n%s", code, body)
	}
	// A second load at the same heads reads them once and downloads
	// nothing: the page is served from what the first load read. Only
	// the time of the read (to the second) may differ.
	start = time.Now()
	if !readTime.MatchString(body) {
		t.Errorf("the page says no time it was read:\n%s", body)
	}
	if code, again := fetch(t, srv, "GET", "/"); code != 200 || withoutReadTime(again) != withoutReadTime(body) {
		t.Errorf("second GET /: %d, and a page other than the first:\n%s", code, again)
	}
	if a2, p2 := git.Fetches(); a2 != a1+1 || p2 != p1 {
		t.Errorf("second GET / at the same heads: %d reads of the heads, %d packs; want 1 and 0", a2-a1, p2-p1)
	}
	t.Logf("second GET / from Git: %s", time.Since(start))
	// A status commit moves the head: the next load reads it.
	file := strings.TrimPrefix(gitsync.StatusPath("", "shop", "web"), "/")
	text, err := git.ReadFile("app", gitsync.DefaultStatusBranch, file)
	if err != nil || !strings.Contains(text, "StepPaused") {
		t.Fatalf("status file %s: %v\n%s", file, err, text)
	}
	if _, err := git.Commit("app", gitsync.DefaultStatusBranch, "status: shop/web", map[string]string{file: strings.Replace(text, "StepPaused", "StepReady", 1)}); err != nil {
		t.Fatal(err)
	}
	if code, moved := fetch(t, srv, "GET", "/"); code != 200 || !strings.Contains(moved, "StepReady") {
		t.Errorf("GET / after a status commit: %d, the new state not shown\n%s", code, moved)
	}
	if _, err := git.Commit("app", gitsync.DefaultStatusBranch, "status: shop/web", map[string]string{file: text}); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "the page", body, "Git "+repoURL+", branch rollgate/status", "every namespace",
		`<td class="step">2/3</td>`, "StepPaused",
		"<td>a1</td><td>70% traffic</td><td>9/9 pods ready</td>", "<td>c3</td><td>30% traffic</td>",
		"Waiting at the gate of step 2", "<code>"+last.AwaitingApproval.Branch+"</code>", "<td>0.999</td>",
		"Releases (from Git)",
		`<td>a1</td><td>s0</td><td>web=web:a1</td><td>2026-03-01T13:00:00Z</td><td class="Released">Released</td><td>2026-03-01T14:00:00Z</td>`,
		`<td>b2</td><td>a1</td><td>web=web:b2</td><td>2026-03-01T15:00:00Z</td><td class="RolledBack">RolledBack</td><td>2026-03-01T16:00:00Z</td>`,
		`<td class="InProgress">InProgress</td>`, "1/3 StepUpgrade &gt; RolledBack")
	mustNotContain(t, "the page", body, "dash-s3cret-token")

	var p dashboardPage
	code, body = fetch(t, srv, "GET", "/api/rollouts")
	if code != 200 || json.Unmarshal([]byte(body), &p) != nil || len(p.Rollouts) != 1 {
		t.Fatalf("GET /api/rollouts: %d\n%s", code, body)
	}
	web := p.Rollouts[0]
	if web.Step != 2 || web.Gate == nil || web.Gate.Branch == "" || web.Canary.Weight != 30 || web.Stable.Weight != 70 || len(web.Releases) != 3 ||
		web.Releases[0].Outcome != gitsync.OutcomeReleased || web.Releases[1].Outcome != gitsync.OutcomeRolledBack || web.Releases[2].Outcome != gitsync.OutcomeInProgress {
		t.Errorf("web in JSON: %+v", web)
	}
	mustNotContain(t, "the JSON", body, "dash-s3cret-token")
	if code, body = fetch(t, srv, "GET", "/api/rollouts/shop/nothing"); code != 404 {
		t.Errorf("GET of a Rollout without a status file: %d, want 404\n%s", code, body)
	}

	// The command itself: it serves on the address it prints, and stops
	// when its context ends.
	out := &rig.Buffer{}
	cmd := newRootCommand()
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SetArgs([]string{"dashboard", "--repo", withToken, "--listen", "127.0.0.1:0", "--since", "0"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, rest, ok := strings.Cut(out.String(), "rollgate dashboard: http://"); ok {
			addr, _, _ = strings.Cut(rest, "/")
		}
	}
	if addr == "" {
		cancel()
		t.Fatalf("rollgate dashboard printed no address: %q", out.String())
	}
	resp, err := http.Get("http://" + addr + "/api/rollouts/shop/web")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"weight": 30`) {
		t.Errorf("GET from the command's server: %d\n%s", resp.StatusCode, b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("rollgate dashboard after its context ended: %v", err)
	}
	mustNotContain(t, "the command's output", out.String(), "dash-s3cret-token")
}

// TestDashboardGitDown: with the Git server gone, the page answers 502
// with the reason and without the URL's token.
func TestDashboardGitDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	srv := serveDashboardFlags(t, dashboardFlags{git: gitFlags{repo: "http://dash-s3cret-token@" + addr + "/app.git", timeout: 10 * time.Second}})
	code, body := fetch(t, srv, "GET", "/")
	if code != http.StatusBadGateway {
		t.Errorf("GET / with the Git server down: %d, want 502\n%s", code, body)
	}
	mustContain(t, "the page", body, "502 Bad Gateway", "the Git server cannot be read", "connection refused")
	mustNotContain(t, "the page", body, "dash-s3cret-token")
	code, body = fetch(t, srv, "GET", "/api/rollouts/shop/web")
	if code != http.StatusBadGateway || !strings.Contains(body, `"error": "the Git server cannot be read`) {
		t.Errorf("GET /api/rollouts/shop/web with the Git server down: %d\n%s", code, body)
	}
	mustNotContain(t, "the JSON", body, "dash-s3cret-token")
}

// readTime is the page's "read <time>", which each load sets to its own
// time to the second.
var readTime = regexp.MustCompile(`read \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)

// withoutReadTime is page without the time it was read.
func withoutReadTime(page string) string { return readTime.ReplaceAllString(page, "read <time>") }
