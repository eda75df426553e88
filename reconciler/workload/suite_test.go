package workload_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/rollgate/rollgate/reconciler/stripped"
	"github.com/rollgate/rollgate/reconciler/webhook/webhooktest"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// The suite shares one kwok cluster (real kube-controller-manager and
// scheduler, three fake nodes) with rollgate's webhook registered on a
// loopback URL; every test works in its own namespace.
var suite struct {
	c client.Client
	// cached reads through an informer cache that serves
	// workload.OwnerIndex, as the controller's client does.
	cached client.Client
	// stripped is cached as the controller caches (stripped.Cache): no
	// managedFields, pods and ReplicaSets kept as workload.StripPod and
	// workload.StripReplicaSet make them.
	stripped client.Client
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	scheme, err := rig.Scheme()
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cluster, err := kwok.Create(ctx, kwok.Options{Nodes: 3, Scheme: scheme, Timeout: 3 * time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := 1
	defer func() {
		if code != 0 {
			fmt.Fprintf(os.Stderr, "kwok cluster %s logs:\n%s", cluster.Name, cluster.LogTails(30))
		}
		if err := cluster.Delete(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	root, err := repo.FindRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := crenvtest.InstallCRDs(cluster.RESTConfig, crenvtest.CRDInstallOptions{
		Scheme: scheme, Paths: []string{filepath.Join(root, "charts", "rollgate", "crds")}, ErrorIfPathMissing: true,
	}); err != nil {
		fmt.Fprintln(os.Stderr, "install CRDs:", err)
		return 1
	}
	if _, err := webhooktest.Run(ctx, cluster.RESTConfig, scheme, "rollgate-kwok", nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	suite.c = cluster.Client
	if suite.cached, err = indexedClient(ctx, cluster.RESTConfig, cache.Options{Scheme: scheme}, false); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if suite.stripped, err = indexedClient(ctx, cluster.RESTConfig, cache.Options{
		Scheme:           scheme,
		DefaultTransform: cache.TransformStripManagedFields(),
	}, true); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code = m.Run()
	return code
}

// indexedClient starts an informer cache with workload.OwnerIndex (a
// stripped.Cache with strip) and returns a client that reads through it.
func indexedClient(ctx context.Context, cfg *rest.Config, opts cache.Options, strip bool) (client.Client, error) {
	var c cache.Cache
	var err error
	if strip {
		c, err = stripped.NewCache(cfg, opts)
	} else {
		c, err = cache.New(cfg, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	if err := workload.IndexOwners(ctx, c); err != nil {
		return nil, err
	}
	go func() {
		if err := c.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "cache:", err)
		}
	}()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("cache did not sync")
	}
	return client.New(cfg, client.Options{Scheme: opts.Scheme, Cache: &client.CacheOptions{Reader: c}})
}
