package flux

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/rig"
)

// TestStartAndStop: the CRDs install and are Established, both controllers
// come up, a controller that dies is reported with its log, and Stop ends
// the other one.
func TestStartAndStop(t *testing.T) {
	cluster, ctx := clusterWithCRDs(t)
	for _, name := range []string{"gitrepositories.source.toolkit.fluxcd.io", "kustomizations.kustomize.toolkit.fluxcd.io"} {
		if !Established(ctx, cluster.Client, name) {
			t.Fatalf("CRD %s is not Established", name)
		}
	}

	dir := t.TempDir()
	c, err := Start(ctx, Options{Kubeconfig: cluster.Kubeconfig, Dir: dir})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop()
		}
	}()
	if err := c.Exited(); err != nil {
		t.Fatalf("Exited right after Start: %v", err)
	}
	if !proc.Listening(c.StorageAddr) {
		t.Fatalf("source-controller's artifact server does not listen on %s", c.StorageAddr)
	}

	// When kustomize-controller dies, Exited names it with its log.
	kc := c.procs[1]
	if err := syscall.Kill(kc.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-kc.Done()
	err = c.Exited()
	if err == nil || !strings.Contains(err.Error(), KustomizeController+" exited unexpectedly") ||
		!strings.Contains(err.Error(), dir+"/"+KustomizeController+".log") {
		t.Fatalf("Exited after kustomize-controller died: %v", err)
	}

	// Stop ends source-controller; Exited is then quiet.
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-c.procs[0].Done():
	default:
		t.Fatal("source-controller still runs after Stop")
	}
	if err := c.Exited(); err != nil {
		t.Fatalf("Exited after Stop: %v", err)
	}
}

// clusterWithCRDs starts a kwok cluster with Flux's CRDs installed, and
// gives the test 2 minutes.
func clusterWithCRDs(t *testing.T) (*kwok.Cluster, context.Context) {
	t.Helper()
	cluster := kwok.Start(t, kwok.Options{Scheme: rig.NewScheme(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	if err := InstallCRDs(ctx, cluster.Kubeconfig, ""); err != nil {
		t.Fatalf("InstallCRDs: %v", err)
	}
	return cluster, ctx
}
