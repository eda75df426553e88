package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rollgate/rollgate/test/rig"
)

// TestPlanExamples plans every example: all valid, and the echoserver's
// steps counted for the 5 replicas its Deployment declares. (Most examples
// are a Rollout alone: their workloadRef warnings go to stderr.)
func TestPlanExamples(t *testing.T) {
	out, stderr, code := runPlanSplit(t, "plan", "-o", "json", "../../examples")
	if code != exitOK {
		t.Fatalf("exit %d:\n%s\n%s", code, out, stderr)
	}
	var r planReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(r.Invalid) > 0 || len(r.Rollouts) < 7 {
		t.Fatalf("want every example valid and planned, got %d Rollouts, invalid %+v", len(r.Rollouts), r.Invalid)
	}
	var echo *rolloutPlan
	for i := range r.Rollouts {
		if r.Rollouts[i].Name == "echoserver" {
			echo = &r.Rollouts[i]
		}
	}
	if echo == nil || echo.Replicas != 5 || len(echo.Steps) != 3 {
		t.Fatalf("echoserver plan = %+v", echo)
	}
	want := []struct {
		newPods, oldPods int32
		split, pause     string
	}{{1, 4, "95% old / 5% new", "approval"}, {2, 3, "60% old / 40% new", "10m0s"}, {5, 0, "0% old / 100% new", ""}}
	for i, w := range want {
		s := echo.Steps[i]
		if s.New != w.newPods || s.Old != w.oldPods || s.Traffic[0].Split != w.split || s.Pause != w.pause {
			t.Errorf("step %d = %+v, want %+v", i+1, s, w)
		}
	}
	if b := echo.Steps[0].ApprovalBranch; b != "rollgate/approve/demo/echoserver/<revision>-step-1" {
		t.Errorf("approval branch of step 1 = %q", b)
	}
	if a := echo.Steps[1].Analysis; len(a) != 1 || a[0] != "success-rate" {
		t.Errorf("analysis of step 2 = %v", a)
	}
	mirrored := 0
	for i := range r.Rollouts {
		if ro := r.Rollouts[i]; ro.Name == "payments" {
			mirrored++
			if got := ro.Steps[0].Traffic[0].Split; got != "100% old, 20% copied to new" {
				t.Errorf("payments (examples/rollout-mirror-sticky.yaml): step 1 traffic %q, want the mirror step's", got)
			}
			if ro.Steps[0].NewDeclared != "1" {
				t.Errorf("payments: step 1 has %q new pods, want 1", ro.Steps[0].NewDeclared)
			}
		}
	}
	if mirrored != 1 {
		t.Errorf("found %d plans of examples/rollout-mirror-sticky.yaml, want 1", mirrored)
	}
	verified := 0
	for i := range r.Rollouts {
		if ro := r.Rollouts[i]; ro.Name == "shop" && strings.HasPrefix(ro.Steps[0].Traffic[0].Router, "HTTPRoute") {
			verified++
			if a := ro.Steps[0].Analysis; len(a) != 1 || a[0] != "traffic share verified (10%)" {
				t.Errorf("shop (trafficRoutings[].verify): analysis of step 1 = %v, want its traffic share verified", a)
			}
		}
	}
	if verified != 1 {
		t.Errorf("found %d plans of examples/rollout-traffic-verify.yaml, want 1", verified)
	}
	// examples/fleet-waves.yaml: prod-eu's wave waits for staging; the
	// last wave for prod-eu (with a bake) and a share of prod-us-*.
	var fleetNotes []string
	for _, ro := range r.Rollouts {
		if ro.Name == "storefront-prod" {
			fleetNotes = append(fleetNotes, ro.Notes...)
		}
	}
	for _, want := range []string{
		"the release waits for cluster staging's store/storefront to complete the same images",
		"the release waits for cluster prod-eu's store/storefront-prod to complete the same images and bake 1h0m0s",
		"the release waits for at least 10% of clusters prod-us-* for their store/storefront-prod to complete the same images",
	} {
		if !slices.ContainsFunc(fleetNotes, func(n string) bool { return strings.HasPrefix(n, want) }) {
			t.Errorf("storefront-prod (examples/fleet-waves.yaml): notes %q, want one starting %q", fleetNotes, want)
		}
	}

	for _, format := range []string{"table", "markdown"} {
		out, code := runMain(t, "plan", "-o", format, "../../examples/echoserver")
		if code != exitOK || !strings.Contains(out, "rollgate/approve/demo/echoserver/<revision>-step-1") || !strings.Contains(out, "60% old / 40% new") {
			t.Errorf("-o %s: exit %d:\n%s", format, code, out)
		}
	}
}

// TestPlanRefusesWhatTheAPIServerRefuses: an invalid Rollout exits 6 and
// names the field and the rule's message; an unknown field is named too;
// helm template output on standard input gets the namespace of -n.
func TestPlanRefusesWhatTheAPIServerRefuses(t *testing.T) {
	dir := t.TempDir()
	bad := strings.Replace(rolloutYAML("web", "web"), `traffic: "5%"`, `traffic: "150%"`, 1)
	write(t, filepath.Join(dir, "bad.yaml"), bad)
	out, code := runMain(t, "plan", dir)
	if code != exitInvalid || !strings.Contains(out, "spec.strategy.canary.steps[0].traffic") || !strings.Contains(out, `traffic must be a percentage from "0%" to "100%"`) {
		t.Fatalf("exit %d, want %d naming the field and the rule:\n%s", code, exitInvalid, out)
	}

	typo := strings.Replace(rolloutYAML("web", "web"), "trafficRoutings:", "trafficRouting:", 1)
	write(t, filepath.Join(dir, "bad.yaml"), typo)
	out, code = runMain(t, "plan", dir)
	if code != exitInvalid || !strings.Contains(out, "spec.strategy.canary.trafficRouting") || !strings.Contains(out, "unknown field") {
		t.Fatalf("exit %d, want %d naming the unknown field:\n%s", code, exitInvalid, out)
	}

	// Standard input, as helm template prints it: no namespace.
	rendered := strings.ReplaceAll(rolloutYAML("web", "web")+"---\n"+deploymentYAML("web", "web:1", 4), "namespace: demo", "")
	cmd := exec.Command(os.Args[0], "plan", "-n", "shop", "-o", "json", "-")
	cmd.Env = append(os.Environ(), "ROLLGATE_TEST_RUN_MAIN=1")
	cmd.Stdin = strings.NewReader(rendered)
	data, err := cmd.Output()
	var r planReport
	if err != nil || json.Unmarshal(data, &r) != nil || len(r.Rollouts) != 1 || r.Rollouts[0].Namespace != "shop" || r.Rollouts[0].Replicas != 4 {
		t.Fatalf("plan of standard input: %v\n%s", err, data)
	}

	// The same, against a base rendered the same way with another image.
	base := filepath.Join(dir, "base.yaml")
	write(t, base, strings.ReplaceAll(rolloutYAML("web", "web")+"---\n"+deploymentYAML("web", "web:0", 4), "namespace: demo", ""))
	cmd = exec.Command(os.Args[0], "plan", "-n", "shop", "--base-file", base, "-")
	cmd.Env = append(os.Environ(), "ROLLGATE_TEST_RUN_MAIN=1")
	cmd.Stdin = strings.NewReader(rendered)
	data, err = cmd.Output()
	if err != nil || !strings.Contains(string(data), "releases: the pod template changed (web: web:0 -> web:1)") {
		t.Fatalf("plan against a rendered base: %v\n%s", err, data)
	}
}

// TestPlanBaseOnAGitHistory: in a repository of two commits, the second
// bumps one app's image and only scales the other: plan --base HEAD~1 says
// the first is released and the second is not, through the CI recipe of
// docs/pull-requests.md (examples/ci/rollgate-plan.sh). A change of
// workloadRef is refused as an update.
func TestPlanBaseOnAGitHistory(t *testing.T) {
	repo := t.TempDir()
	git := gitIn(t, repo)
	git("init", "-q", "-b", "main")
	write(t, filepath.Join(repo, "apps/web/rollout.yaml"), rolloutYAML("web", "web"))
	write(t, filepath.Join(repo, "apps/web/deployment.yaml"), deploymentYAML("web", "web:1.0", 5))
	write(t, filepath.Join(repo, "apps/api/rollout.yaml"), rolloutYAML("api", "api"))
	write(t, filepath.Join(repo, "apps/api/deployment.yaml"), deploymentYAML("api", "api:1.0", 3))
	git("add", ".")
	git("commit", "-q", "-m", "first")
	write(t, filepath.Join(repo, "apps/web/deployment.yaml"), deploymentYAML("web", "web:2.0", 5))
	write(t, filepath.Join(repo, "apps/api/deployment.yaml"), deploymentYAML("api", "api:1.0", 6))
	git("commit", "-q", "-am", "release web, scale api")

	// The CI recipe, with this test binary as rollgate.
	bin := t.TempDir()
	write(t, filepath.Join(bin, "rollgate"), "#!/bin/sh\nROLLGATE_TEST_RUN_MAIN=1 exec "+os.Args[0]+" \"$@\"\n")
	if err := os.Chmod(filepath.Join(bin, "rollgate"), 0o755); err != nil {
		t.Fatal(err)
	}
	recipe, err := filepath.Abs("../../examples/ci/rollgate-plan.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", recipe)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "BASE=HEAD~1", "PATHS=apps", "OUT=plan.md")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the CI recipe failed: %v\n%s", err, out)
	}
	md, err := os.ReadFile(filepath.Join(repo, "plan.md"))
	if err != nil || string(md) != string(out) {
		t.Fatalf("plan.md (%v) differs from what the recipe printed", err)
	}
	for _, want := range []string{
		"| `demo/web` | **releases: the pod template changed (web: web:1.0 -> web:2.0)** |",
		"| `demo/api` | no release: the pod template is unchanged |",
		"| 1 | 1 | 5 | 95% old / 5% new |", // api at its new size, 6 pods
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the comment lacks %q:\n%s", want, md)
		}
	}

	// A Rollout pointed at another workload is refused as the API server
	// refuses the update.
	write(t, filepath.Join(repo, "apps/api/rollout.yaml"), strings.Replace(rolloutYAML("api", "api"), "name: api}", "name: api-v2}", 1))
	outText, code := runMain(t, "plan", "--base", "HEAD", filepath.Join(repo, "apps"))
	if code != exitInvalid || !strings.Contains(outText, "spec.workloadRef is immutable") {
		t.Fatalf("exit %d, want %d refusing the workloadRef change:\n%s", code, exitInvalid, outText)
	}
}

func rolloutYAML(name, workload string) string {
	return `apiVersion: rollgate.dev/v1alpha1
kind: Rollout
metadata: {name: ` + name + `, namespace: demo}
spec:
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: ` + workload + `}
  strategy:
    canary:
      steps:
      - {traffic: "5%", replicas: 1, pause: {}}
      - {traffic: "100%", replicas: "100%"}
      trafficRoutings:
      - {service: ` + name + `, gateway: {httpRouteName: ` + name + `}}
`
}

func deploymentYAML(name, image string, replicas int) string {
	return `apiVersion: apps/v1
kind: Deployment
metadata: {name: ` + name + `, namespace: demo}
spec:
  replicas: ` + strconv.Itoa(replicas) + `
  selector: {matchLabels: {app: ` + name + `}}
  template:
    metadata: {labels: {app: ` + name + `}}
    spec:
      containers: [{name: ` + name + `, image: "` + image + `"}]
`
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPlanDaemonSet: a DaemonSet's pods depend on the nodes: without
// --nodes the steps give their replicas as written, with it they count.
func TestPlanDaemonSet(t *testing.T) {
	dir := t.TempDir()
	rollout := rig.Rollout{Name: "agent", Namespace: "ops", Kind: "DaemonSet", WithoutTraffic: true,
		Steps: []string{`{replicas: 1, pause: {}}`, `{replicas: "50%"}`, `{replicas: "100%"}`}}
	write(t, filepath.Join(dir, "agent.yaml"), rollout.YAML()+`---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: ops}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: "agent:1"}]}
`)
	out, code := runMain(t, "plan", dir)
	if code != exitOK || !strings.Contains(out, "pass --nodes to count pods") || !strings.Contains(out, "2     50%   the rest") {
		t.Fatalf("without --nodes: exit %d\n%s", code, out)
	}
	out, code = runMain(t, "plan", "--nodes", "8", "-o", "json", dir)
	var r planReport
	if code != exitOK || json.Unmarshal([]byte(out), &r) != nil || len(r.Rollouts) != 1 {
		t.Fatalf("with --nodes: exit %d\n%s", code, out)
	}
	if s := r.Rollouts[0].Steps; s[0].New != 1 || s[0].Old != 7 || s[1].New != 4 || s[1].Old != 4 || s[2].New != 8 {
		t.Errorf("steps on 8 nodes = %+v", s)
	}
}

// runPlanSplit is runMain with standard output and standard error apart
// (plan prints its warnings on stderr).
func runPlanSplit(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "ROLLGATE_TEST_RUN_MAIN=1")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("running rollgate %s: %v", strings.Join(args, " "), err)
		}
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// planJSON runs plan -o json and decodes its report.
func planJSON(t *testing.T, args ...string) (planReport, string) {
	t.Helper()
	out, stderr, code := runPlanSplit(t, append([]string{"plan", "-o", "json"}, args...)...)
	var r planReport
	if code != exitOK || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("plan %v: exit %d:\n%s\n%s", args, code, out, stderr)
	}
	return r, stderr
}

// TestPlanRendersKustomizations: the overlay of testdata/plan/kustomize
// sets the namespace, 10 replicas (a patch) and the image of its base; the
// plan counts the rendered 10 pods in namespace shop, as Flux or Argo CD
// would apply them, whether the folder, a file in it or a folder above it
// is named; the objects are named by the folder rendered.
func TestPlanRendersKustomizations(t *testing.T) {
	overlay := filepath.Join("testdata", "plan", "kustomize", "overlays", "prod")
	for _, arg := range []string{overlay, filepath.Join(overlay, "replicas.yaml"), filepath.Join(overlay, "kustomization.yaml")} {
		r, _ := planJSON(t, arg)
		if len(r.Rollouts) != 1 {
			t.Fatalf("plan %s: %d Rollouts, want 1: %+v", arg, len(r.Rollouts), r.Rollouts)
		}
		p := r.Rollouts[0]
		if p.Namespace != "shop" || p.Replicas != 10 || p.Source != "kustomize build "+overlay {
			t.Errorf("plan %s: Rollout %s/%s of %d pods from %q, want shop/echoserver of 10 from %q", arg, p.Namespace, p.Name, p.Replicas, p.Source, "kustomize build "+overlay)
		}
		want := [][2]int32{{1, 9}, {5, 5}, {10, 0}}
		for i, s := range p.Steps {
			if i >= len(want) || s.New != want[i][0] || s.Old != want[i][1] {
				t.Errorf("plan %s: step %d = %d new / %d old, want %v", arg, i+1, s.New, s.Old, want)
			}
		}
		if b := p.Steps[0].ApprovalBranch; b != "rollgate/approve/shop/echoserver/<revision>-step-1" {
			t.Errorf("plan %s: approval branch %q, want it in namespace shop", arg, b)
		}
	}

	// The folder above holds no kustomization: each folder below that has
	// one is rendered, the base (5 pods, namespace default) and the overlay.
	r, stderr := planJSON(t, filepath.Join("testdata", "plan", "kustomize"))
	got := map[string]int32{}
	for _, p := range r.Rollouts {
		got[p.Namespace+"/"+p.Name] = p.Replicas
	}
	if len(r.Rollouts) != 2 || got["default/echoserver"] != 5 || got["shop/echoserver"] != 10 || stderr != "" {
		t.Errorf("plan of the base and the overlay: %v, stderr %q; want default/echoserver 5 pods, shop/echoserver 10, no warning", got, stderr)
	}
}

// TestPlanRefusesRemoteBases: a kustomization with a remote resource is
// not fetched: exit 1 naming the entry and its kustomization file.
func TestPlanRefusesRemoteBases(t *testing.T) {
	dir := filepath.Join("testdata", "plan", "remote")
	out, code := runMain(t, "plan", dir)
	want := filepath.Join(dir, "kustomization.yaml") + `: resources entry "https://github.com/example/apps//echoserver?ref=v1.0.0" is remote`
	if code != exitError || !strings.Contains(out, want) {
		t.Fatalf("exit %d, want %d with %q:\n%s", code, exitError, want, out)
	}
	for ref, remote := range map[string]bool{
		"../base": false, "deployment.yaml": false, "github.com/org/repo//apps?ref=v1": true,
		"git@gitlab.com:org/repo.git//apps": true, "ssh://git@host/org/repo": true, "git::https://host/repo": true,
	} {
		if looksRemote(ref) != remote {
			t.Errorf("looksRemote(%q) = %v, want %v", ref, !remote, remote)
		}
	}
}

// TestPlanKustomizationAgainstABase: with --base, a kustomization is
// rendered from the files of the base commit too, so an image bumped in
// the overlay is a release.
func TestPlanKustomizationAgainstABase(t *testing.T) {
	repo := committedCopy(t, filepath.Join("testdata", "plan", "kustomize"))
	k := filepath.Join(repo, "overlays", "prod", "kustomization.yaml")
	data, err := os.ReadFile(k)
	if err != nil {
		t.Fatal(err)
	}
	write(t, k, strings.Replace(string(data), "newTag: 1.1.0", "newTag: 1.2.0", 1))
	out, stderr, code := runPlanSplit(t, "plan", "--base", "HEAD", filepath.Join(repo, "overlays", "prod"))
	want := "releases: the pod template changed (echoserver: registry.example.com/echoserver:1.1.0 -> registry.example.com/echoserver:1.2.0)"
	if code != exitOK || !strings.Contains(out, want) {
		t.Fatalf("exit %d, want %q:\n%s\n%s", code, want, out, stderr)
	}
}

// TestPlanWarnings: testdata/plan/warnings declares demo/web twice, gives
// it an ingress classType with no script, and misspells the workloadRef of
// demo/api; testdata/plan/prefixed renames a workload with a namePrefix.
// Each is a warning on stderr naming file:line (or the folder rendered),
// exit 0; with --strict, exit 6.
func TestPlanWarnings(t *testing.T) {
	dir := filepath.Join("testdata", "plan", "warnings")
	web := filepath.Join(dir, "web.yaml") + ":16"
	r, stderr := planJSON(t, dir)
	for _, want := range []string{
		"warning: Rollout demo/web (" + web + "): declared twice, first at " + filepath.Join(dir, "web-copy.yaml") + ":1",
		"warning: Rollout demo/web (" + web + `): trafficRoutings[0].ingress.classType "traefik" is unknown (built-in: aliyun-alb, higress, mse, nginx)`,
		"warning: Rollout demo/api (" + filepath.Join(dir, "api.yaml") + ":1): spec.workloadRef names Deployment demo/api-sever (apps/v1), which is in none of the files read; the Deployment objects in demo are: api-server, web",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if len(r.Warnings) != 3 {
		t.Errorf("the JSON report has %d warnings, want 3: %+v", len(r.Warnings), r.Warnings)
	}

	// A kustomization's namePrefix renames the workload, not the
	// Rollout's reference to it.
	prefixed := filepath.Join("testdata", "plan", "prefixed")
	_, stderr = planJSON(t, prefixed)
	if want := "warning: Rollout default/prod-echoserver (kustomize build " + prefixed + "): spec.workloadRef names Deployment default/echoserver (apps/v1), which is in none of the files read; the Deployment objects in default are: prod-echoserver"; !strings.Contains(stderr, want) {
		t.Errorf("namePrefix: stderr lacks %q:\n%s", want, stderr)
	}

	out, code := runMain(t, "plan", "--strict", dir)
	if code != exitInvalid || !strings.Contains(out, "Error: --strict: 3 warning(s)") {
		t.Errorf("--strict: exit %d, want %d:\n%s", code, exitInvalid, out)
	}
	// A set without warnings passes --strict.
	if out, code := runMain(t, "plan", "--strict", filepath.Join("testdata", "plan", "kustomize")); code != exitOK {
		t.Errorf("--strict on a set without warnings: exit %d:\n%s", code, out)
	}
}

// TestPlanLines: objects are named file:line, the line their document (or
// List item) starts on, comments and blank lines before it skipped; a YAML
// error names the line of the file, not of the document.
func TestPlanLines(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "app.yaml")
	write(t, file, "# comment\n\n"+deploymentYAML("web", "web:1", 4)+"---\n# the Rollout\n"+rolloutYAML("web", "web")+
		"---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: rollgate.dev/v1alpha1\n  kind: Rollout\n  metadata: {name: web, namespace: demo}\n"+
		"  spec:\n    workloadRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n    strategy: {canary: {steps: [{replicas: \"100%\"}]}}\n")
	_, stderr := planJSON(t, file)
	// Deployment: lines 3-12, "---" 13, comment 14, Rollout 15-26, "---"
	// 27, List 28, its item 31.
	if want := "Rollout demo/web (" + file + ":31): declared twice, first at " + file + ":15"; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}

	write(t, file, deploymentYAML("web", "web:1", 4)+"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a\n")
	out, code := runMain(t, "plan", file)
	if want := file + ":12: "; code != exitError || !strings.Contains(out, want) || !strings.Contains(out, "line 14") {
		t.Errorf("exit %d, want %d naming %q and line 14 of the file:\n%s", code, exitError, want, out)
	}
}

// TestPlanRendersHelmCharts: testdata/plan/chart/web is rendered with
// Helm's library: release name, namespace and a values file over the
// chart's values are planned (8 pods of release shop in namespace web);
// a file of the chart renders the chart; a dependency missing from
// charts/ is refused, not fetched; with --base, the chart is rendered from
// the base commit's files too.
func TestPlanRendersHelmCharts(t *testing.T) {
	chart := filepath.Join("testdata", "plan", "chart", "web")
	values := filepath.Join("testdata", "plan", "chart", "prod-values.yaml")
	r, _ := planJSON(t, "-n", "web", "--release-name", "shop", "--values", values, chart)
	if len(r.Rollouts) != 1 {
		t.Fatalf("%d Rollouts, want 1: %+v", len(r.Rollouts), r.Rollouts)
	}
	p := r.Rollouts[0]
	src := "helm template " + chart + ": web/templates/rollout.yaml"
	if p.Namespace != "web" || p.Name != "shop" || p.Replicas != 8 || p.Source != src || len(p.Steps) != 2 || p.Steps[0].New != 2 {
		t.Errorf("Rollout %s/%s of %d pods from %q, steps %+v; want web/shop of 8 pods from %q, 2 new pods at step 1", p.Namespace, p.Name, p.Replicas, p.Source, p.Steps, src)
	}
	r, _ = planJSON(t, filepath.Join(chart, "templates", "rollout.yaml"))
	if len(r.Rollouts) != 1 || r.Rollouts[0].Name != "web" || r.Rollouts[0].Replicas != 4 {
		t.Errorf("plan of a file of the chart: %+v, want the chart rendered with its own values (web, 4 pods)", r.Rollouts)
	}

	out, code := runMain(t, "plan", filepath.Join("testdata", "plan", "chart", "needs-redis"))
	if want := `dependency "redis" (oci://registry-1.docker.io/bitnamicharts) is not in its charts/ folder`; code != exitError || !strings.Contains(out, want) {
		t.Errorf("missing dependency: exit %d, want %d with %q:\n%s", code, exitError, want, out)
	}

	repo := committedCopy(t, chart)
	write(t, filepath.Join(repo, "values.yaml"), "replicas: 4\nimage: registry.example.com/web:1.1.0\n")
	out, stderr, code := runPlanSplit(t, "plan", "--base", "HEAD", repo)
	want := "releases: the pod template changed (web: registry.example.com/web:1.0.0 -> registry.example.com/web:1.1.0)"
	if code != exitOK || !strings.Contains(out, want) {
		t.Fatalf("--base: exit %d, want %q:\n%s\n%s", code, want, out, stderr)
	}
}

// TestPlanShowsLockstepGroups: examples/lockstep-group.yaml's two members
// are shown as one group whose gates are its coordinator's (the first by
// name): only the coordinator's gate names an approval branch, the other
// member's names the coordinator. A member whose gates are at other steps
// gets a warning naming the other member (so --strict fails on it).
func TestPlanShowsLockstepGroups(t *testing.T) {
	example := filepath.Join("..", "..", "examples", "lockstep-group.yaml")
	r, _ := planJSON(t, example)
	if len(r.Groups) != 1 || r.Groups[0].Coordinator != "checkout-api" || strings.Join(r.Groups[0].Members, ",") != "checkout-api,checkout-worker" {
		t.Fatalf("groups %+v, want checkout of checkout-api (coordinator) and checkout-worker", r.Groups)
	}
	for _, p := range r.Rollouts {
		s := p.Steps[0]
		switch p.Name {
		case "checkout-api":
			if s.ApprovalBranch != "rollgate/approve/shop/checkout-api/<revision>-step-1" {
				t.Errorf("coordinator's gate: branch %q", s.ApprovalBranch)
			}
		default:
			if s.ApprovalBranch != "" || s.Pause != "the group's gate, approved on checkout-api" {
				t.Errorf("%s's gate: branch %q pause %q, want the coordinator's gate", p.Name, s.ApprovalBranch, s.Pause)
			}
		}
	}

	dir := t.TempDir()
	data, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	// The worker's gate moves to step 2.
	moved := strings.Replace(string(data), "- {replicas: 1, pause: {}}\n      - {replicas: \"50%\", pause: {duration: 2m}}",
		"- {replicas: 1}\n      - {replicas: \"50%\", pause: {}}", 1)
	write(t, filepath.Join(dir, "group.yaml"), moved)
	r, _ = planJSON(t, dir)
	found := 0
	for _, w := range r.Warnings {
		if strings.Contains(w.Message, "has gates (pause without duration) at steps") && strings.Contains(w.Message, "no member of the group will start") {
			found++
		}
	}
	if found != 2 {
		t.Errorf("warnings %+v, want one on each member naming the other's gates", r.Warnings)
	}
}

// gitIn runs git in repo as a test author (no signing), failing the test
// on an error.
func gitIn(t *testing.T, repo string) func(args ...string) {
	return func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@rollgate.invalid", "-c", "commit.gpgsign=false"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

// committedCopy is a new Git repository holding a copy of dir in one
// commit on main.
func committedCopy(t *testing.T, dir string) string {
	t.Helper()
	repo := t.TempDir()
	if err := os.CopyFS(repo, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	git := gitIn(t, repo)
	git("init", "-q", "-b", "main")
	git("add", ".")
	git("commit", "-q", "-m", "first")
	return repo
}
