package flux

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
	running
}

// StartHelm starts helm-controller next to the controllers of Start (it
// fetches chart artifacts from their source-controller) and waits until it
// listens. It reconciles HelmReleases in every namespace, as in a
// cluster. On error nothing is left running.
func StartHelm(ctx context.Context, o Options) (*Helm, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
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
	h := &Helm{running{procs: []*proc.Process{p}}}
	if err := waitListening(ctx, 60*time.Second, h.Exited, health); err != nil {
		return nil, errors.Join(err, h.Stop())
	}
	return h, nil
}

// HelmReleaseState reads what a HelmRelease says of itself: its Ready
// condition, "<status> (<message>)" ("" when it has none), and its last
// release, "<chart version> <status>" ("" before the first).
func HelmReleaseState(u *unstructured.Unstructured) (ready, last string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Ready" {
			ready = fmt.Sprintf("%v (%v)", m["status"], m["message"])
		}
	}
	history, _, _ := unstructured.NestedSlice(u.Object, "status", "history")
	if len(history) > 0 {
		m, _ := history[0].(map[string]any)
		last = fmt.Sprintf("%v %v", m["chartVersion"], m["status"])
	}
	return ready, last
}
