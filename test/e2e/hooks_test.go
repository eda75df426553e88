package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/rig"
)

// hookServer is the HTTP server a story's hooks call: it records every
// call and answers each path as the story says.
type hookServer struct {
	*httptest.Server
	mu      sync.Mutex
	calls   []hookCall
	answers map[string][]hookReply // per path; the last one repeats
}

type hookCall struct {
	Path    string
	At      time.Time
	Payload map[string]any
}

type hookReply struct {
	status int
	body   string
}

func startHookServer(t *testing.T) *hookServer {
	s := &hookServer{answers: map[string][]hookReply{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var payload map[string]any
		_ = json.Unmarshal(raw, &payload)
		s.mu.Lock()
		s.calls = append(s.calls, hookCall{Path: r.URL.Path, At: time.Now(), Payload: payload})
		n := 0
		for _, c := range s.calls {
			if c.Path == r.URL.Path {
				n++
			}
		}
		replies := s.answers[r.URL.Path]
		reply := hookReply{status: http.StatusNotFound}
		if len(replies) > 0 {
			reply = replies[min(n, len(replies))-1]
		}
		s.mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(reply.status)
		fmt.Fprint(rw, reply.body)
	}))
	t.Cleanup(s.Close)
	return s
}

// answer makes path answer replies in turn, the last one from then on.
func (s *hookServer) answer(path string, replies ...hookReply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers[path] = replies
}

// callsTo returns the calls made to path so far.
func (s *hookServer) callsTo(path string) []hookCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []hookCall
	for _, c := range s.calls {
		if c.Path == path {
			out = append(out, c)
		}
	}
	return out
}

// hookedRollout is the echoserver Rollout (no traffic) with a before hook
// at before and a confirm after hook on step 1, and an onRollback hook.
func hookedRollout(url, before string) string {
	return rig.Rollout{Name: "echoserver", Namespace: "demo", WithoutTraffic: true,
		OnRollback: []string{fmt.Sprintf(`{name: page, url: "%s/rollback", interval: 1s}`, url)},
		Strategy: fmt.Sprintf(`
      steps:
      - replicas: 1
        hooks:
          before:
          - {name: load-test, url: "%[1]s%[2]s?revision={{rollout.canaryRevision}}", interval: 1s, retries: 2}
          after:
          - name: sign-off
            url: "%[1]s/sign-off"
            confirm: true
            interval: 1s
            successCondition: "status == 200 && body.approved == true"
      - {replicas: "100%%"}
`, url, before)}.YAML()
}

// TestHooksGateTheSteps: hooks are real HTTP calls to a server the story
// runs. A before hook holds step 1 with no new pod until it answers yes
// (a 503 first, then 200); a confirm after hook holds step 1's end, its
// pod up, until its body says approved; then the release completes. The
// next release's before hook keeps answering 500: after its retries the
// release fails (HookFailed) before any new pod, and the onRollback hook is
// called once with the failure. Every call carries where the release is.
func TestHooksGateTheSteps(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	hooks := startHookServer(t)
	hooks.answer("/before", hookReply{503, `{"error": "warming up"}`}, hookReply{200, `{}`})
	hooks.answer("/sign-off", hookReply{200, `{"approved": false}`})
	hooks.answer("/broken", hookReply{500, `{"error": "load test failed"}`})
	hooks.answer("/rollback", hookReply{200, `{}`})

	w.ApplyYAML(echoApp("echo:1.0"))
	w.ApplyYAML(hookedRollout(hooks.URL, "/before"))
	w.Eventually(60*time.Second, "v1 running", func(ctx context.Context) (bool, error) {
		return w.Pods(w.NS, "echoserver")["echo:1.0"] == [2]int{5, 5} && conditions.IsReady(w.Rollout(w.NS, "echoserver")), nil
	})

	// v2: the before hook says no once, then yes.
	w.ApplyYAML(echoApp("echo:2.0"))
	w.Eventually(30*time.Second, "the before hook asked", func(ctx context.Context) (bool, error) {
		return len(hooks.callsTo("/before")) >= 1, nil
	})
	if n := w.Pods(w.NS, "echoserver")["echo:2.0"][1]; n > 0 && len(hooks.callsTo("/before")) < 2 {
		t.Fatalf("%d pods of echo:2.0 before the before hook said yes", n)
	}
	w.Eventually(60*time.Second, "step 1's pod up after the before hook's yes", func(ctx context.Context) (bool, error) {
		return w.Pods(w.NS, "echoserver")["echo:2.0"] == [2]int{1, 1}, nil
	})
	before := hooks.callsTo("/before")
	if len(before) != 2 {
		t.Errorf("before hook called %d times, want 2 (a 503, then 200)", len(before))
	}
	if p := before[0].Payload; p["point"] != "Before" || p["step"] != float64(1) || p["name"] != "echoserver" || p["namespace"] != w.NS {
		t.Errorf("before hook's payload %v", p)
	}

	// Step 1 done: the confirm hook holds it until approved.
	w.Eventually(60*time.Second, "waiting for the sign-off", func(ctx context.Context) (bool, error) {
		ro := w.Rollout(w.NS, "echoserver")
		return conditions.GetReason(ro, v1alpha1.ProgressingCondition) == v1alpha1.ReasonWaitingForHook &&
			strings.Contains(ro.Status.Message, `hook "sign-off" (after the step) waits for confirmation`), nil
	})
	w.Holds(3*time.Second, "step 1 held by the confirm hook", func(ctx context.Context) error {
		if got := w.Pods(w.NS, "echoserver")["echo:2.0"]; got[1] != 1 {
			return fmt.Errorf("echo:2.0 pods %v while the sign-off says no", got)
		}
		return nil
	})
	asked := len(hooks.callsTo("/sign-off"))
	if asked < 2 {
		t.Errorf("confirm hook asked %d times in 3 s at a 1 s interval", asked)
	}
	hooks.answer("/sign-off", hookReply{200, `{"approved": true}`})
	w.Eventually(90*time.Second, "v2 released", func(ctx context.Context) (bool, error) {
		return conditions.IsReady(w.Rollout(w.NS, "echoserver")) && w.Pods(w.NS, "echoserver")["echo:2.0"] == [2]int{5, 5}, nil
	})

	// v3: a before hook that keeps failing fails the release.
	w.ApplyYAML(hookedRollout(hooks.URL, "/broken"))
	w.ApplyYAML(echoApp("echo:3.0"))
	var ro *v1alpha1.Rollout
	w.Eventually(60*time.Second, "v3 failed by its before hook", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		return ro.Status.Phase == v1alpha1.PhaseFailed && conditions.GetReason(ro, v1alpha1.StalledCondition) == v1alpha1.ReasonHookFailed, nil
	})
	if !strings.Contains(ro.Status.Message, `hook "load-test" (before the step) answered no after 3 calls: HTTP 500`) {
		t.Errorf("message %q", ro.Status.Message)
	}
	if got := w.Pods(w.NS, "echoserver"); got["echo:3.0"][1] != 0 || got["echo:2.0"] != [2]int{5, 5} {
		t.Errorf("pods %v after the failed before hook, want echo:2.0 only", got)
	}
	w.Eventually(30*time.Second, "the onRollback hook called", func(ctx context.Context) (bool, error) {
		return len(hooks.callsTo("/rollback")) == 1, nil
	})
	w.Holds(3*time.Second, "the onRollback hook called once", func(ctx context.Context) error {
		if n := len(hooks.callsTo("/rollback")); n != 1 {
			return fmt.Errorf("onRollback called %d times", n)
		}
		return nil
	})
	if p := hooks.callsTo("/rollback")[0].Payload; p["point"] != "Rollback" || p["phase"] != "Failed" || p["revision"] != ro.Status.CanaryRevision {
		t.Errorf("onRollback payload %v", p)
	}
	if q := hooks.callsTo("/broken"); len(q) != 3 {
		t.Errorf("failing hook called %d times, want 3 (retries 2)", len(q))
	}
}
