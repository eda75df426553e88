package realtraffic

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/realnode"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// theNode is the package's real node, shared by every story.
var theNode = &sharedNode{}

// sharedNode is a real node with the Gateway API CRDs and rollgate
// installed from its chart as a pod (its image, ServiceAccount, RBAC and
// webhook behind its Service). The first story that asks for it starts it;
// every story then runs in a namespace of its own, with its own Traefik,
// Git server and Prometheus, beside the others; TestMain stops it. One node
// for the package instead of one per story: a node and a chart install
// take 15-23 s, and stories that share it can run side by side.
type sharedNode struct {
	once sync.Once
	node *realnode.Cluster
	// ready says how long the node and the install took, for the story that
	// waited for them.
	ready string
	err   error
}

// nodeSetupBudget bounds building the story images and starting the node.
// It is the package's, not the first story's: from a cold Go build cache
// the images' -trimpath builds of the controller and the sample app
// compile every dependency again, which took more than the 12 minutes of
// TestReleaseUnderLoad's own deadline on a fresh machine at load 10 (its
// go build was killed and, the failure being shared, every story of the
// package failed with it).
const nodeSetupBudget = 40 * time.Minute

// get starts the node the first time it is called and returns it. ctx
// only bounds the wait of this story: the setup runs to its own budget.
func (s *sharedNode) get(ctx context.Context) (*realnode.Cluster, error) {
	s.once.Do(func() {
		setup, cancel := context.WithTimeout(context.Background(), nodeSetupBudget)
		defer cancel()
		s.node, s.ready, s.err = startNode(setup)
	})
	if err := ctx.Err(); err != nil && s.err == nil {
		return s.node, fmt.Errorf("the story's deadline passed while the package's node was set up (%s): %w", s.ready, err)
	}
	return s.node, s.err
}

// stop stops the node, when one was started, and restores the host.
func (s *sharedNode) stop() error {
	if s.node == nil {
		return nil
	}
	return s.node.Delete()
}

func startNode(ctx context.Context) (*realnode.Cluster, string, error) {
	start := time.Now()
	helm, err := repo.LookTool("helm")
	if err != nil {
		return nil, "", err
	}
	images, err := storyImages.get(ctx)
	if err != nil {
		return nil, "", err
	}
	built := time.Since(start)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, "", err
		}
	}
	node, err := realnode.Create(ctx, realnode.Options{Images: images, Scheme: scheme})
	if err != nil {
		return nil, "", fmt.Errorf("real node: %w", err)
	}
	up := time.Since(start)
	if err := installRollgate(ctx, node, helm); err != nil {
		return nil, "", errors.Join(fmt.Errorf("%w\ncontroller log:\n%s", err, controllerLog(node, 30)), node.Delete())
	}
	return node, fmt.Sprintf("images %s, real node up at %s (API server %s, logs in %s), rollgate installed and serving its webhook at %s",
		built.Round(time.Millisecond), up.Round(time.Millisecond), node.Server, node.Dir, time.Since(start).Round(time.Millisecond)), nil
}

// installRollgate applies the Gateway API CRDs Traefik uses and Traefik's
// own (IngressRoute, TraefikService, ...), and installs
// rollgate from its chart, then waits until its webhook answers.
func installRollgate(ctx context.Context, node *realnode.Cluster, helm string) error {
	for _, crds := range []string{"gateway-api-crds", "traefik-crds"} {
		dir := filepath.Join(repo.ToolsDir(), crds)
		if out, err := node.Kubectl(ctx, "apply", "--server-side", "-f", dir); err != nil {
			return fmt.Errorf("%s: %v\n%s", dir, err, out)
		}
	}
	if out, err := runHelm(ctx, node, helm, "install", release, chartDir(), "-n", releaseNS, "--create-namespace",
		"--set", "image.repository=localhost/rollgate", "--set", "image.tag=test", "--set", "image.pullPolicy=Never",
		"--wait", "--timeout=3m"); err != nil {
		return fmt.Errorf("helm install: %v\n%s", err, out)
	}
	return waitWebhook(ctx, node.Client)
}

func chartDir() string { return filepath.Join(repo.Root(), "charts", "rollgate") }

func runHelm(ctx context.Context, node *realnode.Cluster, helm string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, helm, append(args, "--kubeconfig", node.Kubeconfig)...).CombinedOutput()
	return string(out), err
}

// waitWebhook waits until the controller has written its CA into its
// webhook configuration and the webhook answers through its Service.
func waitWebhook(ctx context.Context, c client.Client) error {
	err := poll(ctx, 2*time.Minute, "the controller's CA is in its MutatingWebhookConfiguration", func() (bool, string) {
		var mwc admissionregistrationv1.MutatingWebhookConfiguration
		if err := c.Get(ctx, types.NamespacedName{Name: release}, &mwc); err != nil {
			return false, err.Error()
		}
		for _, wh := range mwc.Webhooks {
			if len(wh.ClientConfig.CABundle) == 0 {
				return false, "no CA bundle yet"
			}
		}
		return len(mwc.Webhooks) > 0, "no webhooks"
	})
	if err != nil {
		return err
	}
	// The pod is ready, but the node's kube-proxy programs the Service a
	// moment later: until then the API server's calls are refused. A
	// server-side dry run of an AnalysisTemplate (whose webhook fails
	// closed) succeeds only once the webhook answers through the Service.
	probe := webhookProbe(releaseNS)
	return poll(ctx, time.Minute, "the webhook answers through its Service", func() (bool, string) {
		err := c.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return err == nil, fmt.Sprint(err)
	})
}

// poll waits until cond holds (see rig.Wait), for the package's node,
// which no one test owns.
func poll(ctx context.Context, limit time.Duration, what string, cond func() (bool, string)) error {
	_, err := rig.Wait(ctx, limit, what, func(context.Context) (bool, string, error) {
		ok, last := cond()
		return ok, last, nil
	})
	return err
}

// controllerLog is the tail of the controller pods' logs.
func controllerLog(node *realnode.Cluster, n int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, _ := node.Kubectl(ctx, "-n", releaseNS, "logs", "--tail", fmt.Sprint(n), "-l", "app.kubernetes.io/name=rollgate", "--all-containers", "--prefix")
	return out
}
