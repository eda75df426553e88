package argocd_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/rig"
)

var applicationGVK = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Application"}

// app is one application in Git, synced by one Argo CD Application into
// its own namespace.
type app struct {
	t    *testing.T
	e    *env
	name string // Application, Git repository and namespace
	// ssa adds the sync option ServerSideApply=true.
	ssa bool
}

// appFiles are the application's files in Git at image, as a user writes
// them: Deployment, Service, HTTPRoute and the Rollout, in the folder app/.
func appFiles(image, rolloutExtra string) map[string]string {
	return map[string]string{
		"app/deployment.yaml": rig.Deployment("", "echoserver", image, 4),
		"app/service.yaml":    rig.Service("", "echoserver"),
		"app/httproute.yaml":  rig.HTTPRoute("", "echoserver"),
		"app/rollout.yaml": rig.Rollout{Name: "echoserver", Steps: []string{
			`{traffic: "5%", replicas: 1, pause: {}}`,
			`{traffic: "50%", replicas: "50%", pause: {duration: 6s}` + rolloutExtra + `}`,
			`{traffic: "100%", replicas: "100%"}`,
		}}.YAML(),
	}
}

// newApp creates the Git repository, the namespace and the Application
// (automated sync with prune and selfHeal, as docs/argocd.md recommends)
// and waits until Argo CD has synced it and the Rollout is Healthy.
func newApp(t *testing.T, name string, ssa bool) *app {
	return newAppWith(t, name, ssa, "\n  annotations: {"+compareOptions+"}", appFiles("echo:1.0", ""))
}

// compareOptions is the annotation docs/argocd.md puts on the Application:
// Argo CD diffs through a server-side dry run, which passes rollgate's
// admission webhooks, so the fields a release holds are not a difference.
const compareOptions = "argocd.argoproj.io/compare-options: ServerSideDiff=true"

// newAppWith is newApp with extra metadata lines (annotations) for the
// Application.
func newAppWith(t *testing.T, name string, ssa bool, meta string, files map[string]string) *app {
	t.Helper()
	a := &app{t: t, e: shared, name: name, ssa: ssa}
	ctx := context.Background()
	url, err := a.e.git.CreateRepo(name, files)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := a.e.c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	opts := ""
	if ssa {
		opts = "\n    syncOptions: [ServerSideApply=true]"
	}
	if _, err := a.e.kubectl(ctx, fmt.Sprintf(`apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: %s
  namespace: argocd%s
spec:
  project: default
  source: {repoURL: %q, targetRevision: main, path: app}
  destination: {server: https://kubernetes.default.svc, namespace: %s}
  syncPolicy:
    automated: {prune: true, selfHeal: true}%s
`, name, meta, url, name, opts), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := a.e.argo.CLI(context.Background(), "app", "get", name, "--show-operation")
			t.Logf("argocd app get %s:\n%s", name, out)
		}
		_, _ = a.e.kubectl(context.Background(), "", "-n", "argocd", "delete", "application", name, "--wait=false")
	})
	a.eventually(2*time.Minute, "synced, the Rollout Healthy and v1 running", func(s appState) bool {
		return s.sync == "Synced" && s.res["Rollout"].health == "Healthy" && a.readyPods("echo:1.0") == 4
	})
	return a
}

// resState is one resource's row in the Application's status.
type resState struct{ sync, health, message string }

// appState is what Argo CD reports about the Application.
type appState struct {
	sync, health string
	res          map[string]resState // by kind
	revision     string
	operation    string // phase of the last operation
}

func (s appState) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "app %s/%s", s.sync, s.health)
	for _, k := range []string{"Rollout", "Deployment", "HTTPRoute", "Service"} {
		if r, ok := s.res[k]; ok {
			fmt.Fprintf(&b, " %s %s/%s", k, r.sync, r.health)
		}
	}
	if r := s.res["Rollout"]; r.message != "" {
		fmt.Fprintf(&b, " (%s)", r.message)
	}
	return b.String()
}

// state reads the Application the way the UI does, from argocd-server's
// REST API: the Application for its sync and health, and the resource tree
// for the health of each resource (Argo CD 3 keeps resource health out of
// the Application's status by default).
func (a *app) state() (appState, error) {
	var app struct {
		Status struct {
			Sync struct {
				Status   string `json:"status"`
				Revision string `json:"revision"`
			} `json:"sync"`
			Health struct {
				Status string `json:"status"`
			} `json:"health"`
			Resources []struct {
				Kind, Name, Status string
			} `json:"resources"`
			OperationState struct {
				Phase string `json:"phase"`
			} `json:"operationState"`
		} `json:"status"`
	}
	if err := a.e.argo.GetJSON("/api/v1/applications/"+a.name, &app); err != nil {
		return appState{}, err
	}
	var tree struct {
		Nodes []struct {
			Kind, Name string
			Health     struct{ Status, Message string } `json:"health"`
		} `json:"nodes"`
	}
	if err := a.e.argo.GetJSON("/api/v1/applications/"+a.name+"/resource-tree", &tree); err != nil {
		return appState{}, err
	}
	s := appState{res: map[string]resState{}, sync: app.Status.Sync.Status, health: app.Status.Health.Status,
		revision: app.Status.Sync.Revision, operation: app.Status.OperationState.Phase}
	for _, r := range app.Status.Resources {
		if r.Name == "echoserver" {
			s.res[r.Kind] = resState{sync: r.Status}
		}
	}
	for _, n := range tree.Nodes {
		if r, ok := s.res[n.Kind]; ok && n.Name == "echoserver" {
			r.health, r.message = n.Health.Status, n.Health.Message
			s.res[n.Kind] = r
		}
	}
	return s, nil
}

// eventually looks at the Application every 100 ms until cond holds, and
// returns what it saw then.
func (a *app) eventually(timeout time.Duration, what string, cond func(appState) bool) appState {
	a.t.Helper()
	var last appState
	took, err := rig.WaitEvery(context.Background(), 100*time.Millisecond, timeout, what, func(context.Context) (bool, string, error) {
		if err := a.e.argo.Exited(); err != nil {
			return false, "", err
		}
		s, err := a.state()
		if err != nil {
			return false, err.Error(), nil
		}
		last = s
		return cond(s), fmt.Sprintf("%v", s), nil
	})
	if err != nil {
		a.t.Fatal(err)
	}
	a.t.Logf("%s: after %s", what, took.Round(time.Millisecond))
	return last
}

// refresh asks Argo CD to compare with Git now, as `argocd app get
// --refresh` does, through the refresh annotation.
func (a *app) refresh() {
	a.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(applicationGVK)
	u.SetNamespace("argocd")
	u.SetName(a.name)
	patch := `{"metadata":{"annotations":{"argocd.argoproj.io/refresh":"normal"}}}`
	if err := a.e.c.Patch(context.Background(), u, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		a.t.Fatal(err)
	}
}

// commit writes files to main in Git and asks Argo CD to look at once.
func (a *app) commit(msg string, files map[string]string) string {
	a.t.Helper()
	head, err := a.e.git.Commit(a.name, "main", msg, files)
	if err != nil {
		a.t.Fatal(err)
	}
	a.refresh()
	return head
}

// rollout reads the Rollout.
func (a *app) rollout() *v1alpha1.Rollout {
	a.t.Helper()
	ro := &v1alpha1.Rollout{}
	if err := a.e.c.Get(context.Background(), client.ObjectKey{Namespace: a.name, Name: "echoserver"}, ro); err != nil {
		a.t.Fatal(err)
	}
	return ro
}

// readyPods counts the ready pods running image.
func (a *app) readyPods(image string) int {
	var list corev1.PodList
	if err := a.e.c.List(context.Background(), &list, client.InNamespace(a.name), client.MatchingLabels{"app": "echoserver"}); err != nil {
		return -1
	}
	n := 0
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil || p.Spec.Containers[0].Image != image {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n
}

// action runs a rollgate action on the Rollout through argocd-server, with
// the argocd CLI as a user would.
func (a *app) action(name string) string {
	a.t.Helper()
	out, err := a.e.argo.CLI(context.Background(), "app", "actions", "run", a.name, name,
		"--group", "rollgate.dev", "--kind", "Rollout", "--resource-name", "echoserver")
	if err != nil {
		a.t.Fatalf("action %s: %v", name, err)
	}
	return out
}

// diff returns `argocd app diff` for the Application: empty when Argo CD
// sees nothing to change.
func (a *app) diff() string {
	a.t.Helper()
	out, err := a.e.argo.CLI(context.Background(), "app", "diff", a.name)
	if err != nil && !strings.Contains(err.Error(), "exit status 1") {
		a.t.Fatalf("argocd app diff: %v", err)
	}
	return strings.TrimSpace(out)
}

// sampler reads the Application every 100 ms and files each sample under
// the phase the story is in, so that a story can count what Argo CD showed
// in each of its phases.
type sampler struct {
	a     *app
	mu    sync.Mutex
	label string
	seen  map[string][]appState // phase -> samples
	// diffs holds `argocd app diff` taken when a sample first showed the
	// Application OutOfSync, for the log.
	diffs    []string
	captures int
	wg       sync.WaitGroup
	stop     chan struct{}
	done     chan struct{}
}

func (a *app) sample() *sampler {
	s := &sampler{a: a, seen: map[string][]appState{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			// A sample belongs to the phase it was started in: its two
			// reads take up to seconds on a busy machine, and a phase that
			// began meanwhile (the test saw the gate settle in its own
			// reads) must not be charged with what was read before
			// (fresh-clone run at 12757e7: the gate's first sample showed
			// the Application Progressing, read before the test's own
			// read saw it Suspended).
			s.mu.Lock()
			label := s.label
			s.mu.Unlock()
			st, err := a.state()
			if err != nil {
				continue
			}
			s.mu.Lock()
			if label != "" {
				s.seen[label] = append(s.seen[label], st)
			}
			capture := st.sync == "OutOfSync" && s.captures < 3
			if capture {
				s.captures++
			}
			s.mu.Unlock()
			if capture {
				// Off the sampling loop: the CLI takes seconds on a busy machine.
				s.wg.Add(1)
				go func() {
					defer s.wg.Done()
					out, _ := a.e.argo.CLI(context.Background(), "app", "diff", a.name)
					s.mu.Lock()
					s.diffs = append(s.diffs, fmt.Sprintf("%v:\n%s", st, out))
					s.mu.Unlock()
				}()
			}
		}
	}()
	return s
}

// phase files the next samples under label ("" files none).
func (s *sampler) phase(label string) {
	s.mu.Lock()
	s.label = label
	s.mu.Unlock()
}

// finish stops sampling and returns the samples by phase.
func (s *sampler) finish() map[string][]appState {
	close(s.stop)
	<-s.done
	s.wg.Wait()
	for _, d := range s.diffs {
		s.a.t.Logf("%s OutOfSync: argocd app diff at %s", s.a.name, d)
	}
	return s.seen
}

// sampleKey is what a sample says about the Application and the Rollout.
func sampleKey(s appState) string {
	k := fmt.Sprintf("app %s/%s, Rollout %s", s.sync, s.health, s.res["Rollout"].health)
	var out []string
	for kind, r := range s.res {
		if r.sync != "Synced" {
			out = append(out, kind+" "+r.sync)
		}
	}
	if len(out) > 0 {
		sort.Strings(out)
		k += " (" + strings.Join(out, ", ") + ")"
	}
	return k
}

// check prints the samples of phase by what they showed and fails the test
// for every sample that ok rejects, printing the count.
func check(t *testing.T, app, phase string, samples []appState, ok func(appState) bool) {
	t.Helper()
	counts := map[string]int{}
	bad := 0
	for i, s := range samples {
		counts[sampleKey(s)]++
		if !ok(s) {
			bad++
			if bad <= 5 {
				// Every resource's sync and health, to tell which one
				// made the Application differ.
				t.Logf("%s %s: sample %d of %d: %s", app, phase, i+1, len(samples), s)
			}
		}
	}
	var keys []string
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "; %s: %d", k, counts[k])
	}
	t.Logf("%s %s: %d samples, %d bad%s", app, phase, len(samples), bad, b.String())
	if len(samples) == 0 {
		t.Errorf("%s %s: no samples", app, phase)
	}
	if bad > 0 {
		t.Errorf("%s %s: %d of %d samples not as docs/argocd.md promises", app, phase, bad, len(samples))
	}
}
