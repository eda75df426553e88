package walkthrough

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/docpage"
	"github.com/rollgate/rollgate/test/flux"
	"github.com/rollgate/rollgate/test/gitserver"
	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// The Git server's only account; the page's GIT_USER and GIT_TOKEN.
const (
	gitUser  = "git"
	gitToken = "walkthrough-token-3f9c"
)

// pageEnv is what a page's commands read from the environment: the Git
// repository at gitURL with the server's account, and the controller's
// image.
func pageEnv(gitURL string) map[string]string {
	return map[string]string{
		"GIT_URL":        gitURL,
		"GIT_USER":       gitUser,
		"GIT_TOKEN":      gitToken,
		"ROLLGATE_IMAGE": "registry.example.com/rollgate",
		"ROLLGATE_TAG":   "dev",
	}
}

// TestFluxGettingStarted runs docs/getting-started-flux.md from an empty
// cluster to a released canary, every shell block in order, and then checks
// the outcome the page promises: every pod on the new image, the Rollout
// Healthy, Flux at the head of main, and Git's status file saying Healthy.
func TestFluxGettingStarted(t *testing.T) {
	t.Parallel()
	blocks := pageBlocks(t, "docs/getting-started-flux.md")
	cluster := kwok.Start(t, kwok.Options{Nodes: 2, Scheme: rig.NewScheme(t)})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("state of the cluster:\n%s", fluxState(cluster.Client))
		}
	})
	git, gitURL := readersGit(t)
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	hooks, controller := pageHooks(ctx, t, cluster.Kubeconfig)
	hooks["flux-install"] = func() error {
		if err := flux.InstallCRDs(ctx, cluster.Kubeconfig, ""); err != nil {
			return err
		}
		if err := createNamespace(ctx, cluster.Client, "flux-system"); err != nil {
			return err
		}
		ctrls, err := flux.Start(ctx, flux.Options{Kubeconfig: cluster.Kubeconfig, Dir: t.TempDir()})
		if err != nil {
			return err
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("Flux: %v", ctrls.Exited())
			}
			_ = ctrls.Stop()
		})
		return nil
	}
	env := pageEnv(gitURL)

	s, err := StartSession(repo.Root(), sessionEnv(t, cluster.Kubeconfig, home))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	last := runPage(ctx, t, s, "docs/getting-started-flux.md", blocks, env, hooks)
	if *controller == nil {
		t.Fatal("the controller never started")
	}

	// What the page promises at the end.
	if !strings.Contains(last, "echoserver") || !strings.Contains(last, "Healthy") {
		t.Errorf("`rollgate status --repo` did not report echoserver Healthy:\n%s", last)
	}
	checkReleased(ctx, t, cluster.Client, "registry.example.com/echoserver:1.1.0")
	head, err := git.Head("app-repo", "main")
	if err != nil {
		t.Fatal(err)
	}
	approvals, err := git.ReadFile("app-repo", "main", "apps/echoserver/rollout.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(approvals, "approvals:") || !strings.Contains(approvals, "step: 1") {
		t.Errorf("the merged approval is not in rollout.yaml on main:\n%s", approvals)
	}
	waitFluxAt(ctx, t, cluster.Client, head)
}

// pageBlocks are the blocks of the page at pagePath in the repository.
func pageBlocks(t *testing.T, pagePath string) []docpage.Block {
	t.Helper()
	page, err := os.ReadFile(filepath.Join(repo.Root(), pagePath))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := docpage.Parse(string(page))
	if err != nil {
		t.Fatalf("%s: %v", pagePath, err)
	}
	return blocks
}

// readersGit is the reader's Git server, with their credentials, holding
// repository app-repo with a README; it returns the server and the
// repository's URL.
func readersGit(t *testing.T) (*gitserver.Server, string) {
	t.Helper()
	git := gitserver.Start(t, gitserver.Options{Username: gitUser, Password: gitToken})
	gitURL, err := git.CreateRepo("app-repo", map[string]string{"README.md": "# app-repo\n"})
	if err != nil {
		t.Fatal(err)
	}
	return git, gitURL
}

// checkReleased checks the end of a getting-started page: Rollout
// demo/echoserver Healthy and its 4 pods all on image. It returns the
// Rollout.
func checkReleased(ctx context.Context, t *testing.T, c client.Client, image string) *v1alpha1.Rollout {
	t.Helper()
	var ro v1alpha1.Rollout
	if err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "echoserver"}, &ro); err != nil {
		t.Fatal(err)
	}
	if ro.Status.Phase != v1alpha1.PhaseHealthy {
		t.Errorf("Rollout phase %q, want Healthy (%s)", ro.Status.Phase, ro.Status.Message)
	}
	images := podImages(ctx, t, c)
	if want := []string{image + " x4"}; strings.Join(images, ",") != strings.Join(want, ",") {
		t.Errorf("pods by image: %v, want %v", images, want)
	}
	return &ro
}

// sessionEnv is the environment of the page's shell: the test machine's PATH
// with the repository's tools first, the cluster's kubeconfig, a temporary
// HOME, and Git's identity and credentials (a reader has them configured).
func sessionEnv(t *testing.T, kubeconfig, home string) []string {
	t.Helper()
	path := strings.Join([]string{repo.ToolsDir(), filepath.Join(repo.ToolsDir(), "k8s"), os.Getenv("PATH")}, string(os.PathListSeparator))
	tool(t, "kubectl")
	tool(t, "helm")
	credentials := fmt.Sprintf("!f() { test \"$1\" = get && echo username=%s && echo password=%s; }; f", gitUser, gitToken)
	env := []string{
		"PATH=" + path,
		"HOME=" + home,
		"KUBECONFIG=" + kubeconfig,
		"LANG=C.UTF-8",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Walkthrough Reader", "GIT_AUTHOR_EMAIL=reader@rollgate.invalid",
		"GIT_COMMITTER_NAME=Walkthrough Reader", "GIT_COMMITTER_EMAIL=reader@rollgate.invalid",
		"GIT_CONFIG_COUNT=2",
		"GIT_CONFIG_KEY_0=credential.helper", "GIT_CONFIG_VALUE_0=" + credentials,
		"GIT_CONFIG_KEY_1=init.defaultBranch", "GIT_CONFIG_VALUE_1=main",
		// The test's Git server is plain HTTP (see the page's last section).
		"ROLLGATE_GIT_INSECURE_HTTP=true",
	}
	// Go needs its caches (the page runs `make build`).
	for _, k := range []string{"GOPATH", "GOCACHE", "GOMODCACHE", "GOFLAGS", "GOTOOLCHAIN", "GOPROXY", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for _, k := range []string{"GOPATH", "GOCACHE", "GOMODCACHE"} {
		if _, ok := os.LookupEnv(k); !ok {
			if v, err := exec.Command("go", "env", k).Output(); err == nil {
				env = append(env, k+"="+strings.TrimSpace(string(v)))
			}
		}
	}
	return env
}

// exportsFor replaces the page's env block with the test's values for the
// same names; a name the test does not know fails the test, so the page and
// the test cannot drift apart.
func exportsFor(t *testing.T, names []string, values map[string]string) string {
	t.Helper()
	var b strings.Builder
	seen := map[string]bool{}
	for _, n := range names {
		v, ok := values[n]
		if !ok {
			t.Fatalf("the page exports %s, which the test does not provide", n)
		}
		seen[n] = true
		fmt.Fprintf(&b, "export %s=%q\n", n, v)
	}
	for n := range values {
		if !seen[n] {
			t.Fatalf("the test provides %s, which the page's env block no longer exports", n)
		}
	}
	return b.String()
}

func tool(t *testing.T, name string) string {
	t.Helper()
	return repo.Tool(t, name)
}

func createNamespace(ctx context.Context, c client.Client, name string) error {
	ns := &corev1.Namespace{}
	ns.Name = name
	return client.IgnoreAlreadyExists(c.Create(ctx, ns))
}

// podImages returns "image xN" for the app's pods, sorted.
func podImages(ctx context.Context, t *testing.T, c client.Client) []string {
	t.Helper()
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace("demo"), client.MatchingLabels{"app": "echoserver"}); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			count[p.Spec.Containers[0].Image]++
		}
	}
	var out []string
	for img, n := range count {
		out = append(out, fmt.Sprintf("%s x%d", img, n))
	}
	sort.Strings(out)
	return out
}

// waitFluxAt waits until Flux has applied commit and its Kustomization is
// Ready: Git, Flux and the cluster agree.
func waitFluxAt(ctx context.Context, t *testing.T, c client.Client, commit string) {
	t.Helper()
	// Ask Flux to fetch now rather than at its 1m interval, as the page does.
	src := &unstructured.Unstructured{}
	src.SetGroupVersionKind(schema.GroupVersionKind{Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "GitRepository"})
	src.SetNamespace("flux-system")
	src.SetName("app-repo")
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"reconcile.fluxcd.io/requestedAt":%q}}}`, time.Now().Format(time.RFC3339Nano))
	if err := c.Patch(ctx, src, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	rig.Until(t, ctx, 2*time.Minute, "Flux applied main@"+commit, func() (bool, string) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Kind: "Kustomization"})
		if err := c.Get(ctx, client.ObjectKey{Namespace: "flux-system", Name: "echoserver"}, u); err != nil {
			return false, err.Error()
		}
		rev, _, _ := unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		ready := ""
		for _, x := range conds {
			if m, _ := x.(map[string]any); m["type"] == "Ready" {
				ready = fmt.Sprint(m["status"])
			}
		}
		return strings.HasSuffix(rev, commit) && ready == "True", fmt.Sprintf("lastAppliedRevision %q, Ready %s", rev, ready)
	})
}

func indent(s string) string {
	if s == "" {
		return "    (no output)"
	}
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

// fluxState is what a failed page needs to be read: the Rollouts' status,
// the Deployments' images and rollgate's annotation, and where Flux's
// source and Kustomization stand.
func fluxState(c client.Client) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	var ros v1alpha1.RolloutList
	if err := c.List(ctx, &ros); err != nil {
		fmt.Fprintf(&b, "Rollouts: %v\n", err)
	}
	for _, ro := range ros.Items {
		fmt.Fprintf(&b, "Rollout %s/%s: phase %s step %d/%d %s, stable %s canary %s, awaiting %+v, message %q\n",
			ro.Namespace, ro.Name, ro.Status.Phase, ro.Status.CurrentStepIndex, ro.Status.StepCount, ro.Status.CurrentStepState,
			ro.Status.StableRevision, ro.Status.CanaryRevision, ro.Status.AwaitingApproval, ro.Status.Message)
		for _, cd := range ro.Status.Conditions {
			fmt.Fprintf(&b, "  %s=%s %s: %s\n", cd.Type, cd.Status, cd.Reason, cd.Message)
		}
	}
	var deps appsv1.DeploymentList
	if err := c.List(ctx, &deps, client.InNamespace("demo")); err != nil {
		fmt.Fprintf(&b, "Deployments: %v\n", err)
	}
	for _, d := range deps.Items {
		var images []string
		for _, ct := range d.Spec.Template.Spec.Containers {
			images = append(images, ct.Image)
		}
		fmt.Fprintf(&b, "Deployment %s: generation %d, images %v, %s=%s\n", d.Name, d.Generation, images,
			v1alpha1.AnnotationControl, d.Annotations[v1alpha1.AnnotationControl])
	}
	for _, gvk := range []schema.GroupVersionKind{
		{Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "GitRepository"},
		{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Kind: "Kustomization"},
	} {
		var list unstructured.UnstructuredList
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := c.List(ctx, &list); err != nil {
			fmt.Fprintf(&b, "%s: %v\n", gvk.Kind, err)
			continue
		}
		for _, u := range list.Items {
			art, _, _ := unstructured.NestedString(u.Object, "status", "artifact", "revision")
			applied, _, _ := unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			fmt.Fprintf(&b, "%s %s/%s: artifact %q, last applied %q, conditions %v\n", gvk.Kind, u.GetNamespace(), u.GetName(), art, applied, conds)
		}
	}
	return b.String()
}
