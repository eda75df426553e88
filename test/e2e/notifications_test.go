package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	netmail "net/mail"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/notify"
	"github.com/rollgate/rollgate/test/rig"
)

// receiver is the HTTP endpoint of the story's webhook service: it keeps
// every request's body and Authorization header.
type receiver struct {
	mu     sync.Mutex
	bodies []string
	auth   []string
}

func (r *receiver) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.bodies = append(r.bodies, string(body))
	r.auth = append(r.auth, req.Header.Get("Authorization"))
	r.mu.Unlock()
}

func (r *receiver) got() ([]string, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bodies...), append([]string(nil), r.auth...)
}

// mailbox is a real SMTP server (emersion/go-smtp) on loopback keeping
// every message it accepts.
type mailbox struct {
	mu   sync.Mutex
	mail []mail
}

type mail struct {
	from string
	to   []string
	data string
}

type smtpSession struct {
	box *mailbox
	m   mail
}

func (s *smtpSession) Reset()        { s.m = mail{} }
func (s *smtpSession) Logout() error { return nil }
func (s *smtpSession) Mail(from string, _ *smtp.MailOptions) error {
	s.m.from = from
	return nil
}
func (s *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.m.to = append(s.m.to, to)
	return nil
}
func (s *smtpSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.m.data = string(b)
	s.box.mu.Lock()
	s.box.mail = append(s.box.mail, s.m)
	s.box.mu.Unlock()
	return nil
}

func startMailbox(t *testing.T) (*mailbox, int) {
	box := &mailbox{}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &smtpSession{box: box}, nil }))
	srv.Domain = "localhost"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return box, l.Addr().(*net.TCPAddr).Port
}

func (b *mailbox) got() []mail {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]mail(nil), b.mail...)
}

// secretWatch counts the writes holding a secret (the notifier's log).
type secretWatch struct {
	mu     sync.Mutex
	secret []byte
	seen   []string
}

func (s *secretWatch) Write(p []byte) (int, error) {
	if bytes.Contains(p, s.secret) {
		s.mu.Lock()
		s.seen = append(s.seen, string(p))
		s.mu.Unlock()
	}
	return len(p), nil
}

// startNotifier runs rollgate-notifier's manager (notify.NewManager, as
// the binary does) for the story's namespace until the test ends, logging
// to log.
func startNotifier(t *testing.T, w *world, log io.Writer) {
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := notify.NewManager(ctx, w.cluster.RESTConfig, notify.ManagerOptions{
		Namespace: w.NS, ConfigMap: "rollgate-notifications", Secret: "rollgate-notifications",
		WatchOwnNamespace: true, Logger: zap.New(zap.UseDevMode(true), zap.WriteTo(log)),
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("notifier: %v", err)
		}
	})
}

// TestNotificationsTellWhereTheReleaseStands: rollgate-notifier sends
// through argoproj's notifications-engine to a webhook receiver and an SMTP
// server the story runs. A release through a gate is told as started,
// waiting at the gate, step done and released, each once; an email tells
// the gate; a second release, aborted, is told as started and rolled back.
// The webhook's token comes from the Secret: the receiver gets it, and
// neither the notifier's log nor any event holds it, not even the
// failure of a service whose URL carries it (its events name the service
// and the trigger). The release never waits for a notification.
func TestNotificationsTellWhereTheReleaseStands(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	token := "tok-" + rand.Text()
	watch := &secretWatch{secret: []byte(token)}
	startNotifier(t, w, io.MultiWriter(w.log, watch))

	recv := &receiver{}
	hook := httptest.NewServer(recv)
	t.Cleanup(hook.Close)
	box, smtpPort := startMailbox(t)
	closed := rig.FreePort(t) // nothing listens there
	// A service that rate-limits every request: the engine's webhook
	// client tries a bounded number of times, then the failure is told.
	var busyCalls atomic.Int32
	busy := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		busyCalls.Add(1)
		rw.Header().Set("Retry-After", "1")
		http.Error(rw, "slow down", http.StatusTooManyRequests)
	}))
	t.Cleanup(busy.Close)

	w.CreateSecret(w.NS, "rollgate-notifications", map[string][]byte{"token": []byte(token)})
	w.ApplyYAML(fmt.Sprintf(`
apiVersion: v1
kind: ConfigMap
metadata: {name: rollgate-notifications, namespace: demo}
data:
  service.webhook.receiver: |
    url: %[1]s/rollouts
    headers: [{name: Authorization, value: "Bearer $token"}]
  service.webhook.down: |
    url: http://127.0.0.1:%[2]d/$token
  service.webhook.busy: |
    url: %[4]s/hook
  service.email: |
    host: 127.0.0.1
    port: %[3]d
    from: rollgate@example.com
  subscriptions: |
    - recipients: [receiver]
      triggers: [on-release-started, on-gate-waiting, on-step-done, on-analysis-failed, on-rolled-back, on-released]
`, hook.URL, closed, smtpPort, busy.URL))

	w.ApplyYAML(echoApp("echo:1.0"))
	w.ApplyYAML(rig.Rollout{Name: "echoserver", Namespace: "demo", WithoutTraffic: true,
		Annotations: `{"notifications.argoproj.io/subscribe.on-gate-waiting.email": "ops@example.com", "notifications.argoproj.io/subscribe.on-released.down": "", "notifications.argoproj.io/subscribe.on-released.busy": ""}`,
		Steps:       []string{`{replicas: 1, pause: {}}`, `{replicas: "100%"}`}}.YAML())
	w.Eventually(60*time.Second, "v1 running", func(ctx context.Context) (bool, error) {
		return conditions.IsReady(w.Rollout(w.NS, "echoserver")), nil
	})

	// v2 through its gate.
	w.ApplyYAML(echoApp("echo:2.0"))
	var ro *v1alpha1.Rollout
	w.Eventually(60*time.Second, "step 1 at its gate", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		return ro.Status.AwaitingApproval != nil, nil
	})
	v2 := ro.Status.CanaryRevision
	w.Eventually(30*time.Second, "the gate told by webhook and email", func(ctx context.Context) (bool, error) {
		bodies, _ := recv.got()
		return len(bodies) >= 2 && len(box.got()) >= 1, nil
	})
	m := box.got()[0]
	msg, err := netmail.ReadMessage(strings.NewReader(m.data))
	if err != nil {
		t.Fatalf("the gate's email does not parse: %v\n%s", err, m.data)
	}
	if subject := msg.Header.Get("Subject"); m.from != "rollgate@example.com" || len(m.to) != 1 || m.to[0] != "ops@example.com" ||
		subject != "[rollgate] "+w.NS+"/echoserver: step 1 of "+v2+" waits for approval" {
		t.Errorf("the gate's email: from %q to %v, subject %q", m.from, m.to, subject)
	}
	w.Update(ro, func() {
		ro.Spec.Approvals = append(ro.Spec.Approvals, v1alpha1.Approval{Revision: v2, Step: 1})
	})
	w.Eventually(60*time.Second, "v2 released", func(ctx context.Context) (bool, error) {
		st := w.Rollout(w.NS, "echoserver").Status
		return st.Phase == v1alpha1.PhaseHealthy && st.StableRevision == v2, nil
	})
	w.Eventually(60*time.Second, "the release told, and the dead and the rate-limiting services' failures on the Rollout", func(ctx context.Context) (bool, error) {
		bodies, _ := recv.got()
		return len(bodies) >= 4 && w.warningEvents(w.NS, "echoserver", notify.ReasonNotificationFailed) >= 2, nil
	})

	// v3, aborted at its gate.
	w.ApplyYAML(echoApp("echo:3.0"))
	w.Eventually(60*time.Second, "v3 at its gate", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		return ro.Status.AwaitingApproval != nil && ro.Status.CanaryRevision != v2, nil
	})
	v3 := ro.Status.CanaryRevision
	w.Update(ro, func() { ro.Spec.Abort = &v1alpha1.RevisionRequest{Revision: v3, Reason: "bad latency"} })
	w.Eventually(60*time.Second, "v3 rolled back and told", func(ctx context.Context) (bool, error) {
		bodies, _ := recv.got()
		st := w.Rollout(w.NS, "echoserver").Status
		return len(bodies) >= 7 && st.Phase == v1alpha1.PhaseFailed && st.CanaryReplicas == 0, nil
	})
	// Whatever else would come, comes within the send timeout's retries.
	time.Sleep(3 * time.Second)

	bodies, auth := recv.got()
	p := w.NS + "/echoserver: "
	want := []string{
		p + "the release of " + v2 + " started (2 steps).",
		p + "step 1 of 2 of " + v2 + " waits for approval.",
		p + v2 + " is at step 2 of 2 (traffic ).",
		p + v2 + " is released.",
		p + "the release of " + v3 + " started (2 steps).",
		p + "step 1 of 2 of " + v3 + " waits for approval.",
	}
	if len(bodies) != len(want)+1 {
		t.Errorf("the receiver got %d notifications, want %d (each transition once):\n%s", len(bodies), len(want)+1, strings.Join(bodies, "\n"))
	}
	for i, b := range want {
		if i >= len(bodies) || bodies[i] != b {
			t.Errorf("notification %d: got %q, want %q", i+1, at(bodies, i), b)
		}
	}
	if last := at(bodies, len(want)); !strings.HasPrefix(last, p+"the release of "+v3+" is rolled back to "+v2+" (Aborted)") {
		t.Errorf("last notification %q, want the rollback of %s (Aborted)", last, v3)
	}
	for i, a := range auth {
		if a != "Bearer "+token {
			t.Errorf("request %d carried Authorization %q, want the Secret's token", i+1, a)
		}
	}
	if n := len(box.got()); n != 2 {
		t.Errorf("%d emails, want 2 (one per gate)", n)
	}
	var events corev1.EventList
	if err := w.C.List(context.Background(), &events, client.InNamespace(w.NS)); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, e := range events.Items {
		if strings.Contains(e.Message, token) {
			t.Errorf("event %s holds the token: %s", e.Reason, e.Message)
		}
		if e.Reason == notify.ReasonNotificationFailed {
			failed++
			switch {
			case strings.Contains(e.Message, "notification on-released to service down not sent"):
				if !strings.Contains(e.Message, "*****") {
					t.Errorf("the dead service's event shows no redacted URL: %s", e.Message)
				}
				t.Logf("the dead service's event: %s", e.Message)
			case strings.Contains(e.Message, "notification on-released to service busy not sent"):
				// The engine's webhook client (go-retryablehttp) says how many
				// times it tried, not what the last answer was
				// (docs/notifications.md).
				if !strings.Contains(e.Message, "giving up after 4 attempt(s)") {
					t.Errorf("the rate-limiting service's event does not say it gave up after 4 attempts: %s", e.Message)
				}
				t.Logf("the rate-limiting service's event: %s", e.Message)
			default:
				t.Errorf("a NotificationFailed event that names neither failing service: %s", e.Message)
			}
		}
	}
	if failed < 2 {
		t.Errorf("%d NotificationFailed events, want one for the dead service and one for the rate-limiting one", failed)
	}
	// 1 try and the engine's 3 retries, then it gives up: a service that
	// keeps refusing is never called without bound.
	if n := busyCalls.Load(); n != 4 {
		t.Errorf("the rate-limiting service was called %d times for one notification, want 4 (a try and 3 retries)", n)
	}
	watch.mu.Lock()
	defer watch.mu.Unlock()
	if len(watch.seen) > 0 {
		t.Errorf("the notifier's log holds the token %d times, first: %s", len(watch.seen), watch.seen[0])
	}
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(none)"
}
