package walkthrough

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/test/argocd"
	"github.com/rollgate/rollgate/test/chartrun"
	"github.com/rollgate/rollgate/test/gitserver"
	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// TestArgoCDGettingStarted runs docs/getting-started-argocd.md from a
// cluster with Argo CD (real Argo CD v3.2.11 as local processes,
// test/argocd) to two released canaries, the first approved by merging
// the approval branch, the second by the approve action through
// argocd-server; every shell block in order. Then it checks what the page
// promises at the end: every pod on 1.2.0, the Rollout Healthy, the
// Application Synced to the head of main, and Git's status file saying
// Healthy.
func TestArgoCDGettingStarted(t *testing.T) {
	t.Parallel()
	const pagePath = "docs/getting-started-argocd.md"
	blocks := pageBlocks(t, pagePath)
	cluster := kwok.Start(t, kwok.Options{Nodes: 2, Scheme: rig.NewScheme(t)})
	git, gitURL := readersGit(t)
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	// "A cluster with Argo CD installed" (see the page's last section).
	argo, err := argocd.Start(ctx, argocd.Options{Kubeconfig: cluster.Kubeconfig, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Argo CD logs (last lines):\n%s", argo.Logs(40))
		}
		_ = argo.Stop()
	})

	hooks, controller := pageHooks(ctx, t, cluster.Kubeconfig)
	env := pageEnv(gitURL)

	// The CLI's environment in place of `argocd login`, and bin/argocd on
	// the PATH.
	senv := sessionEnv(t, cluster.Kubeconfig, home)
	for i, kv := range senv {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			senv[i] = "PATH=" + filepath.Join(repo.ToolsDir(), "argocd") + string(os.PathListSeparator) + p
		}
	}
	senv = append(senv, argo.CLIEnv()...)
	s, err := StartSession(repo.Root(), senv)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	runPage(ctx, t, s, pagePath, blocks, env, hooks)
	if *controller == nil {
		t.Fatal("the controller never started")
	}

	checkArgoCDPageEnd(ctx, t, cluster, git, argo)
}

// pageHooks are what the getting-started tests do instead of, or after,
// a page's marked blocks: the Gateway API CRDs from the repository, and the
// chart's controller run as a local process. The second result points at
// the controller once the hook has started it.
func pageHooks(ctx context.Context, t *testing.T, kubeconfig string) (map[string]func() error, **chartrun.Controller) {
	var controller *chartrun.Controller
	hooks := map[string]func() error{
		"gateway-api-crds": func() error {
			crd := repo.HTTPRouteCRD("standard")
			out, err := exec.CommandContext(ctx, tool(t, "kubectl"), "--kubeconfig", kubeconfig,
				"apply", "--server-side", "-f", crd).CombinedOutput()
			if err != nil {
				return fmt.Errorf("kubectl apply %s: %v\n%s", crd, err, out)
			}
			return nil
		},
		"controller": func() error {
			c, err := chartrun.Start(ctx, chartrun.Options{
				Kubeconfig: kubeconfig,
				Namespace:  "rollgate-system",
				Deployment: "rollgate",
				ExtraArgs:  []string{"--git-allow-insecure-http"},
				LogPath:    filepath.Join(t.TempDir(), "rollgate-controller.log"),
			})
			if err != nil {
				return err
			}
			controller = c
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("rollgate controller log (last lines):\n%s", c.LogTail(60))
				}
				_ = c.Stop()
			})
			return nil
		},
	}
	return hooks, &controller
}

// checkArgoCDPageEnd checks what the page promises at the end: every pod on
// 1.2.0, the Rollout Healthy, the Application Synced to the head of main.
func checkArgoCDPageEnd(ctx context.Context, t *testing.T, cluster *kwok.Cluster, git *gitserver.Server, argo *argocd.Instance) {
	t.Helper()
	ro := checkReleased(ctx, t, cluster.Client, "registry.example.com/echoserver:1.2.0")
	head, err := git.Head("app-repo", "main")
	if err != nil {
		t.Fatal(err)
	}
	var app struct {
		Status struct {
			Sync struct{ Status, Revision string } `json:"sync"`
		} `json:"status"`
	}
	if err := argo.GetJSON("/api/v1/applications/echoserver", &app); err != nil {
		t.Fatal(err)
	}
	if app.Status.Sync.Status != "Synced" || app.Status.Sync.Revision != head {
		t.Errorf("Application %s at %s, want Synced at main's head %s", app.Status.Sync.Status, app.Status.Sync.Revision, head)
	}
	// The status branch follows within a status window (10 s).
	rig.Until(t, ctx, time.Minute, "the status file on rollgate/status saying "+ro.Status.StableRevision+" is released and Healthy", func() (bool, string) {
		status, err := git.ReadFile("app-repo", "rollgate/status", "demo/echoserver.yaml")
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(status, "phase: Healthy") && strings.Contains(status, "revision: "+ro.Status.StableRevision), status
	})
}
