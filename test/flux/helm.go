package flux

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/repo"
)

// HelmController is the name of helm-controller's binary in Options.Bin and
// of its log, helm-controller.log in Options.Dir.
const HelmController = "helm-controller"

// HelmCRDs returns the folder holding the HelmRelease CRD (a crds/
// folder inside it), for InstallCRDs: <repo>/bin/helmcontroller, where
// `make tools-helmcontroller` copies it.
func HelmCRDs() string { return filepath.Join(repo.ToolsDir(), "helmcontroller") }

// Helm is a running helm-controller.
type Helm struct {
	p       *proc.Process
	stopped atomic.Bool
}

// StartHelm starts helm-controller next to the controllers of Start (it
// fetches chart artifacts from their source-controller) and waits until it
// listens. It reconciles HelmReleases in every namespace, as in a
// cluster. On error nothing is left running.
func StartHelm(ctx context.Context, o Options) (*Helm, error) {
	if o.Kubeconfig == "" || o.Dir == "" {
		return nil, errors.New("flux: Options.Kubeconfig and Options.Dir are required")
	}
	if o.Bin == "" {
		o.Bin = defaultBin()
	}
	if o.Namespace == "" {
		o.Namespace = "flux-system"
	}
	ports, err := proc.FreePorts(2)
	if err != nil {
		return nil, err
	}
	health := fmt.Sprintf("127.0.0.1:%d", ports[1])
	args := []string{
		"--metrics-addr=" + fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--health-addr=" + health,
	}
	env := []string{"KUBECONFIG=" + o.Kubeconfig, "RUNTIME_NAMESPACE=" + o.Namespace}
	bin := filepath.Join(o.Bin, HelmController)
	p, err := startController(o.Dir, HelmController, bin, args, env)
	if err != nil {
		return nil, fmt.Errorf("%w (make tools-helmcontroller)", err)
	}
	h := &Helm{p: p}
	if err := waitListening(ctx, 60*time.Second, h.Exited, health); err != nil {
		return nil, errors.Join(err, h.Stop())
	}
	return h, nil
}

// Stop stops helm-controller: SIGTERM to its process group, SIGKILL after
// 10 s.
func (h *Helm) Stop() error {
	h.stopped.Store(true)
	return h.p.Stop(10 * time.Second)
}

// Exited returns an error, with the last lines of its log, when
// helm-controller died; nil while it runs, and after Stop.
func (h *Helm) Exited() error {
	if h.stopped.Load() {
		return nil
	}
	return h.p.Exited()
}
