package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rollgate/rollgate/reconciler/workload"
)

// Options configure the webhook server, its certificates and its
// registration. cmd/ fills them from flags.
type Options struct {
	// Registration says how API servers reach the server (Service or URL).
	Registration Registration
	// Host and Port the server listens on. Defaults: with a URL, its host
	// and port (a loopback URL listens on loopback only); with a Service,
	// all addresses and port 9443.
	Host string
	Port int
	// SecretNamespace and SecretName name the Secret holding the
	// certificates, shared by every replica. The namespace must exist.
	// Default name "rollgate-webhook-certs".
	SecretNamespace string
	SecretName      string
	// Rotation of the certificates (validity, grace before a new CA is
	// served).
	Rotation Rotation
	// CheckInterval is how often the certificates are checked for renewal
	// and the webhook configurations for drift; default 1 hour. The
	// configurations are also watched and put right within seconds of
	// any change: this check is the backstop (a watch RBAC refuses).
	CheckInterval time.Duration
	// Hooks are served and registered besides the workload webhook
	// (a Rollout validating webhook, say).
	Hooks []HookHandler
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Rollouts is where the workload webhook reads Rollouts through
	// workload.RolloutWorkloadIndex; nil means the manager's cached
	// client. The index is registered on the manager's cache either way
	// (the reconciler uses it); a separate reader must serve it itself.
	Rollouts client.Reader
}

// HookHandler is an extra webhook and the handler serving it.
type HookHandler struct {
	Hook
	Handler admission.Handler
}

func (o *Options) defaults() error {
	r := &o.Registration
	if r.Name == "" {
		r.Name = "rollgate"
	}
	if (r.Service == nil) == (r.URL == "") {
		return errors.New("webhook registration: set exactly one of Service and URL")
	}
	if t := r.TimeoutSeconds; t != 0 && (t < MinTimeoutSeconds || t > MaxTimeoutSeconds) {
		return fmt.Errorf("webhook registration: timeout %d s: must be %d to %d", t, MinTimeoutSeconds, MaxTimeoutSeconds)
	}
	if r.Service != nil && r.Service.Port == 0 {
		r.Service.Port = 443
	}
	if o.SecretName == "" {
		o.SecretName = "rollgate-webhook-certs"
	}
	if o.SecretNamespace == "" {
		return errors.New("webhook: SecretNamespace is required")
	}
	if o.CheckInterval <= 0 {
		o.CheckInterval = time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if r.URL != "" && (o.Host == "" || o.Port == 0) {
		u, err := url.Parse(r.URL)
		if err != nil {
			return fmt.Errorf("webhook URL %q: %w", r.URL, err)
		}
		port, err := strconv.Atoi(u.Port())
		if err != nil {
			return fmt.Errorf("webhook URL %q needs a port: %w", r.URL, err)
		}
		if o.Port == 0 {
			o.Port = port
		}
		if ip := net.ParseIP(u.Hostname()); o.Host == "" && ip != nil && ip.IsLoopback() {
			o.Host = u.Hostname()
		}
	}
	if o.Port == 0 {
		o.Port = 9443
	}
	return nil
}

// Setup adds the webhook server to mgr: the workload webhook plus
// opts.Hooks, served with certificates kept in a Secret (see Keeper), and
// the webhook configurations, which the controller creates and updates
// itself and watches, to put them back as soon as they change. It
// registers workload.RolloutWorkloadIndex on mgr's cache, and a readiness
// check "webhook-certificate". Call it before mgr.Start.
func Setup(mgr ctrl.Manager, opts Options) error {
	_, err := New(mgr, opts)
	return err
}

// New is Setup returning the certificate Keeper (tests sync it by hand).
func New(mgr ctrl.Manager, opts Options) (*Keeper, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	hosts, err := opts.Registration.hosts()
	if err != nil {
		return nil, err
	}
	if err := workload.IndexRollouts(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return nil, fmt.Errorf("index Rollouts by workload: %w", err)
	}
	rollouts := opts.Rollouts
	if rollouts == nil {
		rollouts = mgr.GetClient()
	}
	handler := &WorkloadHandler{Rollouts: rollouts, Decoder: admission.NewDecoder(mgr.GetScheme())}
	hooks := []HookHandler{{Hook: WorkloadHook(handler), Handler: handler}}
	hooks = append(hooks, opts.Hooks...)
	pub := &publisher{reader: mgr.GetAPIReader(), writer: mgr.GetClient(), reg: opts.Registration}
	for _, h := range hooks {
		pub.hooks = append(pub.hooks, h.Hook)
	}
	keeper := &Keeper{
		reader:   mgr.GetAPIReader(),
		writer:   mgr.GetClient(),
		secret:   client.ObjectKey{Namespace: opts.SecretNamespace, Name: opts.SecretName},
		hosts:    hosts,
		rotation: opts.Rotation,
		interval: opts.CheckInterval,
		now:      opts.Now,
		publish:  pub.publish,
		changes:  make(chan struct{}, 1),
	}
	watch, err := newConfigWatch(mgr.GetConfig(), mgr.GetHTTPClient(), opts.Registration, pub.hooks, keeper.configurationChanged)
	if err != nil {
		return nil, err
	}
	server := ctrlwebhook.NewServer(ctrlwebhook.Options{
		Host: opts.Host,
		Port: opts.Port,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) {
			c.GetCertificate = keeper.GetCertificate
			c.MinVersion = tls.VersionTLS12
		}},
	})
	for _, h := range hooks {
		server.Register(h.Path, &admission.Webhook{Handler: h.Handler})
	}
	if err := mgr.Add(keeper); err != nil {
		return nil, err
	}
	if err := mgr.Add(watch); err != nil {
		return nil, err
	}
	if err := mgr.Add(server); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("webhook-certificate", keeper.Ready); err != nil {
		return nil, err
	}
	// Ready only once the server answers TLS on its port: before that the
	// API server's calls through the Service would be refused.
	if err := mgr.AddReadyzCheck("webhook-server", server.StartedChecker()); err != nil {
		return nil, err
	}
	return keeper, nil
}
