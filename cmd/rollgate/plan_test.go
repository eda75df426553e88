package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPlanExamples plans every example: all valid, and the echoserver's
// steps counted for the 5 replicas its Deployment declares.
func TestPlanExamples(t *testing.T) {
	out, code := runMain(t, "plan", "-o", "json", "../../examples")
	if code != exitOK {
		t.Fatalf("exit %d:\n%s", code, out)
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
	fleet := 0
	for _, ro := range r.Rollouts {
		if ro.Name == "storefront-prod" {
			fleet++
			if want := "the release waits for cluster staging's store/storefront to complete the same images"; len(ro.Notes) == 0 || !strings.HasPrefix(ro.Notes[len(ro.Notes)-1], want) {
				t.Errorf("storefront-prod (spec.fleet): notes %q, want one starting %q", ro.Notes, want)
			}
		}
	}
	if fleet != 1 {
		t.Errorf("found %d plans of storefront-prod in examples/fleet-waves.yaml, want 1", fleet)
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
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@rollgate.invalid", "-c", "commit.gpgsign=false"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
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
	write(t, filepath.Join(dir, "agent.yaml"), `apiVersion: rollgate.dev/v1alpha1
kind: Rollout
metadata: {name: agent, namespace: ops}
spec:
  workloadRef: {apiVersion: apps/v1, kind: DaemonSet, name: agent}
  strategy:
    canary:
      steps:
      - {replicas: 1, pause: {}}
      - {replicas: "50%"}
      - {replicas: "100%"}
---
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
