// Package envtest starts a real kube-apiserver and etcd for integration tests
// (controller-runtime's envtest) from the repository's bin/k8s folder (`make
// tools`), with rollgate's CRDs from charts/rollgate/crds installed.
//
// A test that needs its own API server calls Start; a suite sharing one API
// server between its tests calls New from TestMain and Stop after m.Run.
package envtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/rollgate/rollgate/test/repo"
)

// DefaultCRDDir is the folder, relative to the repository root, holding
// rollgate's CRDs.
const DefaultCRDDir = "charts/rollgate/crds"

// Option configures an Env.
type Option func(*options)

type options struct {
	crdDir    string
	extraCRDs []string
	scheme    *runtime.Scheme
	modify    []func(*crenvtest.Environment)
	apiServer string
}

// WithCRDDir replaces DefaultCRDDir. A relative dir is taken from the
// repository root. Unlike the default, which may not exist yet, this dir must
// exist.
func WithCRDDir(dir string) Option {
	return func(o *options) { o.crdDir = dir }
}

// WithExtraCRDDirs installs the CRDs of more folders or files (Gateway API,
// Flux), relative to the repository root unless absolute; they must exist.
func WithExtraCRDDirs(dirs ...string) Option {
	return func(o *options) { o.extraCRDs = append(o.extraCRDs, dirs...) }
}

// WithScheme sets the scheme of Env.Client; the default is client-go's scheme
// (built-in kinds only). Register rollgate's API types in it to use them.
func WithScheme(s *runtime.Scheme) Option {
	return func(o *options) { o.scheme = s }
}

// WithAPIServer runs the kube-apiserver binary at path instead of
// bin/k8s/kube-apiserver (one of APIServers).
func WithAPIServer(path string) Option {
	return func(o *options) { o.apiServer = path }
}

// APIServer is a kube-apiserver binary the API tests run against.
type APIServer struct {
	// Name says which: "current" (bin/k8s) or "oldest promised"
	// (bin/k8s-oldest, docs/install.md).
	Name string
	// Path is the binary.
	Path string
}

// APIServers returns the kube-apiservers the API tests run their CRD
// schemas, CEL rules and matchConditions against: the current one and the
// oldest Kubernetes minor rollgate promises (`make tools` builds both). A
// missing binary is an error, never a skip.
func APIServers() ([]APIServer, error) {
	current, err := repo.LookTool("kube-apiserver")
	if err != nil {
		return nil, err
	}
	oldest := filepath.Join(repo.ToolsDir(), "k8s-oldest", "kube-apiserver")
	if _, err := os.Stat(oldest); err != nil {
		return nil, fmt.Errorf("the oldest promised kube-apiserver: %w (run 'make tools-k8s-oldest')", err)
	}
	return []APIServer{{Name: "current", Path: current}, {Name: "oldest promised", Path: oldest}}, nil
}

// WithEnvironment adjusts the controller-runtime Environment before it starts
// (webhook install options, API server flags, timeouts).
func WithEnvironment(fn func(*crenvtest.Environment)) Option {
	return func(o *options) { o.modify = append(o.modify, fn) }
}

// Env is a running API server.
type Env struct {
	// Config is the admin client configuration of the API server.
	Config *rest.Config
	// Client is a controller-runtime client using Config and the scheme.
	Client client.Client
	// Scheme is the scheme of Client.
	Scheme *runtime.Scheme
	// Environment is the underlying controller-runtime environment (its
	// WebhookInstallOptions, for instance, hold the webhook server's port
	// and certificates).
	Environment *crenvtest.Environment
}

// Start starts an API server for the length of a test and stops it on
// cleanup; it fails the test when the server cannot start.
func Start(t testing.TB, opts ...Option) (*rest.Config, client.Client) {
	t.Helper()
	env, err := New(opts...)
	if err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop envtest: %v", err)
		}
	})
	return env.Config, env.Client
}

// New starts an API server outside a test, typically in TestMain:
//
//	func TestMain(m *testing.M) {
//		env, err := envtest.New(envtest.WithScheme(scheme))
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		code := m.Run()
//		if err := env.Stop(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//		}
//		os.Exit(code)
//	}
func New(opts ...Option) (*Env, error) {
	o := options{crdDir: DefaultCRDDir, scheme: clientgoscheme.Scheme}
	for _, opt := range opts {
		opt(&o)
	}
	root, err := repo.FindRoot()
	if err != nil {
		return nil, err
	}
	crdPaths, err := crdPaths(root, o)
	if err != nil {
		return nil, err
	}
	apiServer := o.apiServer
	if apiServer == "" {
		if apiServer, err = repo.LookTool("kube-apiserver"); err != nil {
			return nil, err
		}
	}
	etcd, err := repo.LookTool("etcd")
	if err != nil {
		return nil, err
	}

	te := &crenvtest.Environment{
		Scheme:                o.scheme,
		CRDDirectoryPaths:     crdPaths,
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: filepath.Dir(apiServer),
		// Never talk to whatever cluster USE_EXISTING_CLUSTER points at.
		UseExistingCluster: ptr.To(false),
	}
	// Explicit paths win over KUBEBUILDER_ASSETS and TEST_ASSET_* in the
	// environment, so the pinned binaries are always the ones used.
	te.ControlPlane.GetAPIServer().Path = apiServer
	te.ControlPlane.Etcd = &crenvtest.Etcd{Path: etcd}
	for _, fn := range o.modify {
		fn(te)
	}

	cfg, err := te.Start()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("start envtest: %w", err), te.Stop())
	}
	cfg.QPS, cfg.Burst = 200, 400
	cl, err := client.New(cfg, client.Options{Scheme: o.scheme})
	if err != nil {
		return nil, errors.Join(err, te.Stop())
	}
	return &Env{Config: cfg, Client: cl, Scheme: o.scheme, Environment: te}, nil
}

// Stop stops the API server and etcd and removes their data.
func (e *Env) Stop() error {
	return e.Environment.Stop()
}

// crdPaths resolves the CRD folders: the default one is skipped while it does
// not exist (the CRDs are generated later in a fresh tree), explicit ones
// must exist.
func crdPaths(root string, o options) ([]string, error) {
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(root, p)
	}
	var paths []string
	if dir := abs(o.crdDir); o.crdDir == DefaultCRDDir {
		if hasYAML(dir) {
			paths = append(paths, dir)
		}
	} else {
		paths = append(paths, dir)
	}
	for _, p := range o.extraCRDs {
		paths = append(paths, abs(p))
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("CRD path: %w", err)
		}
	}
	return paths, nil
}

func hasYAML(dir string) bool {
	for _, pattern := range []string{"*.yaml", "*.yml", "*.json"} {
		if m, _ := filepath.Glob(filepath.Join(dir, pattern)); len(m) > 0 {
			return true
		}
	}
	return false
}

// RunAgainstEachAPIServer runs a package's tests once against each of
// APIServers, with rollgate's CRDs installed: it starts the server, hands
// its client to setup, runs m and stops it. It returns the exit code for
// os.Exit: the first failing run's, or 1 when a server cannot start. Each
// run is announced on stderr with the server's version, so a failure says
// which Kubernetes it met.
func RunAgainstEachAPIServer(m *testing.M, setup func(client.Client) error) int {
	servers, err := APIServers()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := 0
	for _, s := range servers {
		env, err := New(WithAPIServer(s.Path), WithCRDDir(DefaultCRDDir))
		if err != nil {
			fmt.Fprintf(os.Stderr, "the %s kube-apiserver (%s): %v\n", s.Name, s.Path, err)
			return 1
		}
		version := "unknown version"
		if dc, err := discovery.NewDiscoveryClientForConfig(env.Config); err == nil {
			if v, err := dc.ServerVersion(); err == nil {
				version = v.GitVersion
			}
		}
		fmt.Fprintf(os.Stderr, "== against the %s kube-apiserver, %s\n", s.Name, version)
		rc := 1
		if err = setup(env.Client); err == nil {
			rc = m.Run()
		} else {
			fmt.Fprintln(os.Stderr, err)
		}
		if rc != 0 {
			fmt.Fprintf(os.Stderr, "== failed against the %s kube-apiserver, %s\n", s.Name, version)
			if code == 0 {
				code = rc
			}
		}
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	return code
}
