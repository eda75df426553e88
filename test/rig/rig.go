// Package rig holds what the cluster tests set up the same way: the
// scheme of their clients, loopback ports for the listeners a controller
// opens, the one way they wait (wait.go: until something holds, saying how
// long it took, or while nothing moves), the World a story works in
// (world.go), and the YAML of the application they release (Deployment,
// Service, HTTPRoute and the Rollout over them).
package rig

import (
	"cmp"
	"context"
	"fmt"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/proc"
)

// Scheme knows the objects the cluster tests read and write: Kubernetes'
// own, CRDs, rollgate's and the Gateway API's.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme, gatewayv1.Install} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// NewScheme is Scheme for a test, which fails when it cannot be built.
func NewScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// FreePort is a free loopback port for a listener a controller opens (see
// proc.FreePorts: below the ephemeral range, so that no outgoing
// connection takes it before the listener binds it).
func FreePort(t testing.TB) int {
	t.Helper()
	ports, err := proc.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

// App is the YAML of an application in namespace ns (no namespace when
// empty): Deployment, Service and HTTPRoute name (see each).
func App(ns, name, image string, replicas int) string {
	return Deployment(ns, name, image, replicas) + "---" + Service(ns, name) + "---" + HTTPRoute(ns, name)
}

// Service is the YAML of Service name in namespace ns (none when empty),
// sending port 80 to port 8080 of the pods labelled app: name. It starts
// with a newline.
func Service(ns, name string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: %s
spec:
  selector: {app: %s}
  ports: [{port: 80, targetPort: 8080}]
`, metadata(ns, name), name)
}

// HTTPRoute is the YAML of HTTPRoute name in namespace ns (none when
// empty) on Gateway "public", sending everything to Service name. It starts
// with a newline.
func HTTPRoute(ns, name string) string {
	return fmt.Sprintf(`
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: %s
spec:
  parentRefs: [{name: public}]
  rules:
  - backendRefs: [{name: %s, port: 80}]
`, metadata(ns, name), name)
}

// Deployment is the YAML of Deployment name in namespace ns (none when
// empty): replicas pods running image in a container called name, labelled
// app: name. It starts with a newline.
func Deployment(ns, name, image string, replicas int) string {
	return fmt.Sprintf(`
apiVersion: apps/v1
kind: Deployment
metadata: %s
spec:
  replicas: %d
  selector: {matchLabels: {app: %[3]s}}
  template:
    metadata: {labels: {app: %[3]s}}
    spec:
      containers:
      - name: %[3]s
        image: %[4]s
`, metadata(ns, name), replicas, name, image)
}

// Rollout is a Rollout of Deployment Name (see App) whose traffic goes
// through the Service and the HTTPRoute of that name, with no grace period
// after a traffic change (or that only scales, with WithoutTraffic).
type Rollout struct {
	// Name of the Rollout, its Deployment, Service and HTTPRoute.
	Name string
	// Namespace of the Rollout; none when empty.
	Namespace string
	// Labels, a YAML flow mapping ({shard: a}); none when empty.
	Labels string
	// Annotations, a YAML flow mapping; none when empty.
	Annotations string
	// BlueGreen releases with strategy.blueGreen instead of canary.
	BlueGreen bool
	// Steps are the strategy's steps, each a YAML flow mapping:
	// {traffic: "20%", replicas: 1, pause: {}}.
	Steps []string
	// WithoutTraffic leaves out trafficRoutings: the steps only scale.
	WithoutTraffic bool
	// GitPath is spec.git.path in Repository GitRepository; no spec.git
	// when empty.
	GitPath string
	// GitRepository is spec.git.repository, "app-repo" when empty.
	GitRepository string
	// Kind is the workload's kind, Deployment when empty.
	Kind string
	// Group is spec.group.name; none when empty.
	Group string
	// OnRollback are spec.strategy.onRollback's hooks, each a YAML flow
	// mapping: {name: page, url: "http://...", interval: 1s}.
	OnRollback []string
	// Approvals are spec.approvals' items, each a YAML flow mapping:
	// {revision: abc, step: 1, approvedBy: e2e}.
	Approvals []string
	// Strategy, when set, is the YAML inside spec.strategy.canary (or
	// blueGreen) in place of Steps and the traffic routing: for a story
	// whose steps or routers the fields above do not say (hooks, Istio,
	// an Ingress). Its lines are indented by six spaces.
	Strategy string
}

// YAML is the Rollout as a document, starting with a newline.
func (r Rollout) YAML() string {
	var b strings.Builder
	meta := metadata(r.Namespace, r.Name)
	if r.Labels != "" {
		meta = strings.TrimSuffix(meta, "}") + ", labels: " + r.Labels + "}"
	}
	if r.Annotations != "" {
		meta = strings.TrimSuffix(meta, "}") + ", annotations: " + r.Annotations + "}"
	}
	strategy := "canary"
	if r.BlueGreen {
		strategy = "blueGreen"
	}
	fmt.Fprintf(&b, `
apiVersion: rollgate.dev/v1alpha1
kind: Rollout
metadata: %s
spec:
  workloadRef: {apiVersion: apps/v1, kind: %s, name: %s}
  strategy:
`, meta, cmp.Or(r.Kind, "Deployment"), r.Name)
	if len(r.OnRollback) > 0 {
		b.WriteString("    onRollback:\n")
		for _, h := range r.OnRollback {
			fmt.Fprintf(&b, "    - %s\n", h)
		}
	}
	fmt.Fprintf(&b, "    %s:\n", strategy)
	if r.Strategy != "" {
		b.WriteString(strings.TrimPrefix(r.Strategy, "\n"))
		if !strings.HasSuffix(r.Strategy, "\n") {
			b.WriteString("\n")
		}
	} else {
		b.WriteString("      steps:\n")
		for _, s := range r.Steps {
			fmt.Fprintf(&b, "      - %s\n", s)
		}
	}
	if !r.WithoutTraffic && r.Strategy == "" {
		fmt.Fprintf(&b, `      trafficRoutings:
      - service: %[1]s
        gracePeriodSeconds: 0
        gateway: {httpRouteName: %[1]s}
`, r.Name)
	}
	if r.GitPath != "" {
		fmt.Fprintf(&b, "  git: {repository: %s, path: %s}\n", cmp.Or(r.GitRepository, "app-repo"), r.GitPath)
	}
	if r.Group != "" {
		fmt.Fprintf(&b, "  group: {name: %s}\n", r.Group)
	}
	if len(r.Approvals) > 0 {
		b.WriteString("  approvals:\n")
		for _, a := range r.Approvals {
			fmt.Fprintf(&b, "  - %s\n", a)
		}
	}
	return b.String()
}

// Object is the Rollout as a typed object, for a test that creates it
// through a client; it fails t when the YAML does not decode strictly.
func (r Rollout) Object(t testing.TB) *v1alpha1.Rollout {
	t.Helper()
	ro := &v1alpha1.Rollout{}
	if err := yaml.UnmarshalStrict([]byte(r.YAML()), ro); err != nil {
		t.Fatalf("Rollout %s: %v", r.Name, err)
	}
	return ro
}

func metadata(ns, name string) string {
	if ns == "" {
		return "{name: " + name + "}"
	}
	return "{name: " + name + ", namespace: " + ns + "}"
}

// Failure runs f as a test body against a testing.TB that records the
// first Fatal, Fatalf, Error or Errorf and, for Fatal and Fatalf, ends f
// there as a test does. It returns what f failed with, "" when it passed:
// for the tests of test helpers.
func Failure(f func(t testing.TB)) string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.failed
}

// recorder is the testing.TB of Failure.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Logf(string, ...any)       {}
func (r *recorder) Log(...any)                {}
func (r *recorder) Error(args ...any)         { r.fail(fmt.Sprint(args...)) }
func (r *recorder) Errorf(f string, a ...any) { r.fail(fmt.Sprintf(f, a...)) }
func (r *recorder) Fatal(args ...any)         { r.fail(fmt.Sprint(args...)); goruntime.Goexit() }
func (r *recorder) Fatalf(f string, a ...any) { r.fail(fmt.Sprintf(f, a...)); goruntime.Goexit() }
func (r *recorder) fail(msg string) {
	if r.failed == "" {
		r.failed = msg
	}
}

// LockstepViolations judges one consistent list of the members of a
// lockstep group (spec.group): it names each member in release that is at
// a step another member in release has not finished the step before of
// (a step is finished once it is Ready for the next, or past it).
func LockstepViolations(members []v1alpha1.Rollout) []string {
	releasing := func(s *v1alpha1.RolloutStatus) bool {
		return s.CanaryRevision != "" && s.CanaryRevision != s.StableRevision && s.Phase != v1alpha1.PhaseFailed
	}
	var out []string
	for _, m := range members {
		s := &m.Status
		if !releasing(s) || s.CurrentStepIndex < 2 {
			continue
		}
		for _, o := range members {
			os := &o.Status
			if o.Name == m.Name || !releasing(os) {
				continue
			}
			done := os.CurrentStepIndex >= s.CurrentStepIndex ||
				(os.CurrentStepIndex == s.CurrentStepIndex-1 && (os.CurrentStepState == v1alpha1.StepReady || os.CurrentStepState == v1alpha1.StepCompleted))
			if !done {
				out = append(out, fmt.Sprintf("%s is at step %d (%s) while %s is at step %d (%s): a member started a step before the group finished the one before",
					m.Name, s.CurrentStepIndex, s.CurrentStepState, o.Name, os.CurrentStepIndex, os.CurrentStepState))
			}
		}
	}
	return out
}

// PastFirstStep counts the members in release at step 2 or later.
func PastFirstStep(members []v1alpha1.Rollout) int {
	n := 0
	for _, m := range members {
		s := &m.Status
		if s.CanaryRevision != "" && s.CanaryRevision != s.StableRevision && s.Phase != v1alpha1.PhaseFailed && s.CurrentStepIndex >= 2 {
			n++
		}
	}
	return n
}

// GroupRecorder lists the Rollouts of a namespace every interval (one list:
// one consistent snapshot) and keeps the first lockstep violations
// (LockstepViolations) it sees.
type GroupRecorder struct {
	stopped    chan struct{}
	cancel     context.CancelFunc
	mu         sync.Mutex
	samples    int
	past1      int
	violations []string
}

// RecordGroup starts a GroupRecorder on the Rollouts of ns.
func RecordGroup(c client.Reader, ns string, interval time.Duration) *GroupRecorder {
	ctx, cancel := context.WithCancel(context.Background())
	r := &GroupRecorder{stopped: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(r.stopped)
		for ctx.Err() == nil {
			var list v1alpha1.RolloutList
			if err := c.List(ctx, &list, client.InNamespace(ns)); err == nil {
				r.mu.Lock()
				r.samples++
				r.past1 += PastFirstStep(list.Items)
				if v := LockstepViolations(list.Items); len(v) > 0 && len(r.violations) < 5 {
					r.violations = append(r.violations, v...)
				}
				r.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	}()
	return r
}

// Stop ends the recorder and returns its samples, the member-samples past
// step 1 (how much of the release it watched) and the violations seen.
func (r *GroupRecorder) Stop() (samples, past1 int, violations []string) {
	r.cancel()
	<-r.stopped
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.samples, r.past1, r.violations
}

// Check stops the recorder and fails the test on every violation it saw,
// or when fewer than minPast1 member-samples were past step 1 (it did not
// watch the release); it logs what it watched.
func (r *GroupRecorder) Check(t testing.TB, minPast1 int) {
	t.Helper()
	samples, past1, violations := r.Stop()
	for _, v := range violations {
		t.Error(v)
	}
	if past1 < minPast1 {
		t.Errorf("the reader saw %d member-samples past step 1 in %d samples, want %d: it did not watch the release", past1, samples, minPast1)
	}
	t.Logf("lockstep held in %d samples (%d member-samples past step 1)", samples, past1)
}
