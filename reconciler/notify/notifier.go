package notify

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"log"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/argoproj/notifications-engine/pkg/api"
	"github.com/argoproj/notifications-engine/pkg/services"
	"github.com/argoproj/notifications-engine/pkg/subscriptions"
	"github.com/go-logr/logr"
	"github.com/hashicorp/go-retryablehttp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// catalog holds the default triggers and templates (catalog.yaml).
//
//go:embed catalog.yaml
var catalog []byte

// ReasonNotificationFailed is the reason of the Warning event a Rollout
// gets when one of its notifications could not be sent.
const ReasonNotificationFailed = "NotificationFailed"

// Bounds: how many notifications wait to be sent, how long one send may
// take, and how many sends that did not answer in time may still be
// running before the next are refused.
const (
	queueSize   = 1024
	maxStuck    = 8
	defaultTTL  = 10 * time.Second
	defaultSend = 30 * time.Second
)

// Options configure a Notifier.
type Options struct {
	// Reader reads the ConfigMap and the Secret (an uncached reader: the
	// notifier does not watch Secrets).
	Reader client.Reader
	// Namespace holds ConfigMap and Secret: the controller's own.
	Namespace string
	// ConfigMap and Secret name the configuration: services, triggers,
	// templates, default subscriptions (the notifications-engine format);
	// the Secret holds the values the ConfigMap names as $key.
	ConfigMap, Secret string
	// Events records NotificationFailed on the Rollout; nil records none.
	Events func(ro *v1alpha1.Rollout, reason, message string)
	// Log receives what was sent and what failed (never a credential).
	Log logr.Logger
	// Reload is how long a configuration read is used; 0 means 10 s.
	Reload time.Duration
	// SendTimeout bounds one send; 0 means 30 s.
	SendTimeout time.Duration
}

// Notifier sends the notifications of Rollouts' transitions, one at a time
// from a bounded queue, so that a slow or dead service never holds the
// watch that found them. Notify queues; Start sends.
type Notifier struct {
	opts  Options
	queue chan job
	stuck atomic.Int32
	// leading is closed once this replica leads (Watch); nil: always.
	leading <-chan struct{}
	// repos reads the Repository of a Rollout (Watch).
	repos client.Reader

	mu       sync.Mutex
	loaded   *setup
	loadedAt time.Time
}

// job is one Rollout's triggers, with the Rollout as it was stored.
type job struct {
	ro       *v1alpha1.Rollout
	triggers []Trigger
}

// setup is a configuration read: nil api when notifications are off (no
// ConfigMap).
type setup struct {
	api     api.API
	config  *api.Config
	secrets []string // the Secret's values, redacted from every message
	err     error
}

// New returns a Notifier; it sends once started (Start).
func New(opts Options) *Notifier {
	if opts.Reload == 0 {
		opts.Reload = defaultTTL
	}
	if opts.SendTimeout == 0 {
		opts.SendTimeout = defaultSend
	}
	silenceRetryLog()
	return &Notifier{opts: opts, queue: make(chan job, queueSize)}
}

// silenceRetryLog stops go-retryablehttp, which the engine's webhook
// service sends with, from writing each request's method and URL to
// standard error: its default logger does, and a webhook URL can hold a
// credential (a Slack or Teams incoming webhook is nothing but one). The
// logger is the library's package-level *log.Logger, reachable only
// through a new client; rollgate reports a failed send itself, with every
// value of the Secret cut out (fail).
func silenceRetryLog() {
	if l, ok := retryablehttp.NewClient().Logger.(*log.Logger); ok {
		l.SetOutput(io.Discard)
	}
}

// Notify queues the triggers of one Rollout's transition; it never
// blocks. A full queue drops them, with a log line.
func (n *Notifier) Notify(ro *v1alpha1.Rollout, triggers []Trigger) {
	if n == nil || len(triggers) == 0 {
		return
	}
	select {
	case n.queue <- job{ro: ro.DeepCopy(), triggers: triggers}:
	default:
		n.opts.Log.Info("notification queue full; notifications dropped", "rollout", client.ObjectKeyFromObject(ro), "triggers", triggers, "queue", queueSize)
	}
}

// Start sends queued notifications until ctx ends (a manager Runnable).
func (n *Notifier) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case j := <-n.queue:
			n.send(ctx, j)
		}
	}
}

// NeedLeaderElection: only the leader sends.
func (n *Notifier) NeedLeaderElection() bool { return true }

// send sends every notification of one job.
func (n *Notifier) send(ctx context.Context, j job) {
	s := n.setup(ctx)
	if s.err != nil {
		n.fail(j.ro, "", "", s, s.err)
		return
	}
	if s.api == nil {
		return
	}
	dests := services.Destinations{}
	dests.Merge(subscriptions.NewAnnotations(j.ro.Annotations).GetDestinations(s.config.DefaultTriggers, s.config.ServiceDefaultTriggers))
	dests.Merge(s.config.GetGlobalDestinations(j.ro.Labels))
	dests.Dedup()
	for _, t := range j.triggers {
		to := dests[string(t)]
		if len(to) == 0 {
			continue
		}
		vars, err := Vars(j.ro, t)
		if err != nil {
			n.fail(j.ro, t, "", s, err)
			continue
		}
		results, err := s.api.RunTrigger(string(t), vars)
		if err != nil {
			n.fail(j.ro, t, "", s, err)
			continue
		}
		for _, r := range results {
			if !r.Triggered {
				continue
			}
			for _, d := range to {
				if err := n.sendOne(s, vars, r.Templates, d); err != nil {
					n.fail(j.ro, t, d.Service, s, err)
					continue
				}
				n.opts.Log.Info("notification sent", "rollout", client.ObjectKeyFromObject(j.ro), "trigger", t, "service", d.Service, "templates", r.Templates)
			}
		}
	}
}

// sendOne sends one notification within SendTimeout. A send that does
// not answer keeps running in the background (the engine's services take
// no context); while maxStuck of them run, the next are refused.
func (n *Notifier) sendOne(s *setup, vars map[string]any, templates []string, d services.Destination) error {
	if n.stuck.Load() >= maxStuck {
		return fmt.Errorf("not sent: %d earlier sends have not answered yet", maxStuck)
	}
	done := make(chan error, 1)
	go func() { done <- s.api.Send(vars, templates, d) }()
	select {
	case err := <-done:
		return err
	case <-time.After(n.opts.SendTimeout):
		n.stuck.Add(1)
		go func() { <-done; n.stuck.Add(-1) }()
		return fmt.Errorf("no answer within %v", n.opts.SendTimeout)
	}
}

// fail reports a notification that was not sent: a log line and a Warning
// event on the Rollout, with every value of the Secret cut out.
func (n *Notifier) fail(ro *v1alpha1.Rollout, t Trigger, service string, s *setup, err error) {
	msg := err.Error()
	if s != nil {
		msg = redact(msg, s.secrets)
	}
	what := "notifications"
	if t != "" {
		what = fmt.Sprintf("notification %s", t)
	}
	if service != "" {
		what += " to service " + service
	}
	text := fmt.Sprintf("%s not sent: %s", what, msg)
	if len(text) > 1000 {
		text = text[:1000] + "…"
	}
	n.opts.Log.Info("notification failed", "rollout", client.ObjectKeyFromObject(ro), "error", text)
	if n.opts.Events != nil {
		n.opts.Events(ro, ReasonNotificationFailed, text)
	}
}

// setup returns the configuration, read again once Reload passed.
func (n *Notifier) setup(ctx context.Context) *setup {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.loaded != nil && time.Since(n.loadedAt) < n.opts.Reload {
		return n.loaded
	}
	n.loaded, n.loadedAt = n.read(ctx), time.Now()
	return n.loaded
}

func (n *Notifier) read(ctx context.Context) *setup {
	cm := &corev1.ConfigMap{}
	if err := n.opts.Reader.Get(ctx, client.ObjectKey{Namespace: n.opts.Namespace, Name: n.opts.ConfigMap}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return &setup{}
		}
		return &setup{err: fmt.Errorf("reading ConfigMap %s/%s: %w", n.opts.Namespace, n.opts.ConfigMap, err)}
	}
	secret := &corev1.Secret{}
	if err := n.opts.Reader.Get(ctx, client.ObjectKey{Namespace: n.opts.Namespace, Name: n.opts.Secret}, secret); err != nil && !apierrors.IsNotFound(err) {
		return &setup{err: fmt.Errorf("reading Secret %s/%s: %w", n.opts.Namespace, n.opts.Secret, err)}
	}
	s := &setup{secrets: secretValues(secret)}
	s.api, s.config, s.err = Configure(cm, secret)
	return s
}

// Configure builds the engine from the user's ConfigMap and Secret over
// rollgate's catalog: a key of the ConfigMap replaces the catalog's key of
// the same name. Errors name the ConfigMap key at fault.
func Configure(cm *corev1.ConfigMap, secret *corev1.Secret) (api.API, *api.Config, error) {
	defaults := map[string]string{}
	if err := yaml.Unmarshal(catalog, &defaults); err != nil {
		return nil, nil, fmt.Errorf("rollgate's notification catalog: %w", err)
	}
	merged := cm.DeepCopy()
	if merged.Data == nil {
		merged.Data = map[string]string{}
	}
	for k, v := range defaults {
		if _, ok := merged.Data[k]; !ok {
			merged.Data[k] = v
		}
	}
	if secret == nil {
		secret = &corev1.Secret{}
	}
	cfg, err := api.ParseConfig(merged, secret)
	if err != nil {
		return nil, nil, fmt.Errorf("ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	a, err := api.NewAPI(*cfg, func(obj map[string]any, _ services.Destination) map[string]any { return obj })
	if err != nil {
		return nil, nil, fmt.Errorf("ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return a, cfg, nil
}

// Vars are what templates and trigger conditions see: the Rollout, the
// release's facts and the trigger's name (catalog.yaml lists them).
func Vars(ro *v1alpha1.Rollout, t Trigger) (map[string]any, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ro)
	if err != nil {
		return nil, err
	}
	s := &ro.Status
	rel := map[string]any{
		"revision": s.CanaryRevision, "stableRevision": s.StableRevision, "attempt": s.Attempt,
		"step": s.CurrentStepIndex, "stepCount": s.StepCount, "phase": string(s.Phase),
		"message": s.Message, "traffic": s.Traffic,
		"pullRequestURL": "", "approvalBranch": "", "revertBranch": "", "revertPullRequestURL": "", "failure": "",
	}
	if a := s.AwaitingApproval; a != nil {
		rel["pullRequestURL"], rel["approvalBranch"], rel["step"] = a.PullRequestURL, a.Branch, a.Step
	}
	if g := s.Git; g != nil {
		rel["revertBranch"], rel["revertPullRequestURL"] = g.RevertBranch, g.RevertPullRequestURL
	}
	if snap := SnapshotOf(ro, false); snap.Failure != "" {
		rel["failure"] = snap.Failure
	}
	return map[string]any{"rollout": obj, "release": rel, "trigger": string(t)}, nil
}

// secretValues lists the Secret's values worth cutting out of messages,
// longest first (so a value inside another is cut after it).
func secretValues(s *corev1.Secret) []string {
	var out []string
	for _, v := range s.Data {
		if len(v) >= 4 {
			out = append(out, string(v))
		}
	}
	for _, v := range s.StringData {
		if len(v) >= 4 {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func redact(msg string, secrets []string) string {
	for _, v := range secrets {
		msg = strings.ReplaceAll(msg, v, "*****")
	}
	return msg
}
