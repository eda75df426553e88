package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/repo"
)

// TestHelmUpgradeFromCI: a pipeline checks the chart out of Git and runs
// `helm upgrade --install --wait` (Helm 3). The upgrade returns, and `helm
// status` says deployed, while rollgate holds the release at its gate with
// one pod of the new version: Helm counts the paused Deployment as ready.
// The approval branch edits the values file; merging it opens the gate
// without another helm run (rollgate reads Git), and the next pipeline run
// renders the merged approval into the Rollout and moves no pod.
func TestHelmUpgradeFromCI(t *testing.T) {
	t.Parallel()
	s := givenChartInstalledByHelm(t)

	gate := s.ciUpgradesToGate("1.0", "2.0")
	s.approvalBranchEditsTheValues(gate)
	s.mergeWithoutHelm(gate, "2.0")
	s.ciRendersTheApproval(gate, "2.0")

	// The next release, taken back with `helm rollback` at its gate.
	s.ciUpgradesToGate("2.0", "3.0")
	s.helmRollbackAtTheGate(3, "2.0")
}

// givenChartInstalledByHelm starts kwok, Git and rollgate, and installs
// version 1 of the chart from a checkout of Git with `helm upgrade
// --install --wait`.
func givenChartInstalledByHelm(t *testing.T) *helmStory {
	s := &helmStory{t: t}
	s.world, s.ctx = newTestWorld(t, nil, 6*time.Minute)
	ctx := s.ctx
	var err error
	s.overlay = chartFiles()
	s.must(s.startCluster(ctx))
	s.must(s.startGit())
	s.must(s.startRollgate(ctx))
	_, err = s.applyYAML(ctx, strings.Replace(repositoryYAML(s.repoURL), "  name: app-repo\n", "  name: app-repo\n  namespace: "+Namespace+"\n", 1))
	s.must(err)
	s.helmCLI("upgrade", "--install", App, s.checkout(), "-n", Namespace, "--wait", "--timeout", "2m")
	s.must(s.until(2*time.Minute, "version 1 to run", func(ctx context.Context) (bool, string, error) {
		ro, err := s.rollout(ctx)
		if err != nil {
			return false, "", err
		}
		images, err := s.images(ctx)
		return ro.Status.Phase == v1alpha1.PhaseHealthy && images == "echo:1.0 x4", fmt.Sprintf("Rollout %s, pods %s", ro.Status.Phase, images), err
	}))
	s.p.step("CI: helm upgrade --install of version 1; the Rollout is Healthy")
	return s
}

// ciUpgradesToGate commits the new tag and runs the pipeline: `helm
// upgrade --wait` returns while the gate waits, and `helm status` says
// deployed.
func (s *helmStory) ciUpgradesToGate(from, tag string) *v1alpha1.Rollout {
	commit, err := s.git.Commit(RepoName, Branch, "echoserver "+tag, map[string]string{valuesFile: valuesYAML(tag)})
	s.must(err)
	s.p.step("developer: pushed %s: %s image.tag -> %s", short(commit), valuesFile, tag)
	s.helmCLI("upgrade", "--install", App, s.checkout(), "-n", Namespace, "--wait", "--timeout", "2m")
	status := s.helmStatus()
	var ro *v1alpha1.Rollout
	s.must(s.until(2*time.Minute, "the release to wait at the gate", func(ctx context.Context) (bool, string, error) {
		if ro, err = s.rollout(ctx); err != nil {
			return false, "", err
		}
		images, err := s.images(ctx)
		gate := ro.Status.AwaitingApproval
		return gate != nil && gate.Branch != "" && images == fmt.Sprintf("echo:%s x3, echo:%s x1", from, tag),
			fmt.Sprintf("Rollout %s step %d, pods %s", ro.Status.Phase, ro.Status.CurrentStepIndex, images), err
	}))
	if status != "deployed" || s.helmStatus() != "deployed" {
		s.t.Errorf("helm status after upgrade --wait: %q, and at the gate %q; want deployed both times (Helm counts the paused Deployment as ready)", status, s.helmStatus())
	}
	s.p.step("CI: helm upgrade --wait returned, helm status %q; rollgate: step 1 waits on %s", status, ro.Status.AwaitingApproval.Branch)
	return ro
}

// mergeWithoutHelm merges the approval branch: the release completes with
// no helm run, rollgate having read the approval from the values file.
func (s *helmStory) mergeWithoutHelm(gate *v1alpha1.Rollout, tag string) {
	merge, err := s.git.Merge(RepoName, Branch, gate.Status.AwaitingApproval.Branch, "Approve step 1 of echoserver "+tag)
	s.must(err)
	s.p.step("reviewer: merged the approval branch (%s); no pipeline runs", short(merge))
	want := gate.Status.CanaryRevision
	s.must(s.until(2*time.Minute, "the release to complete", func(ctx context.Context) (bool, string, error) {
		ro, err := s.rollout(ctx)
		if err != nil {
			return false, "", err
		}
		images, err := s.images(ctx)
		return ro.Status.Phase == v1alpha1.PhaseHealthy && ro.Status.StableRevision == want && conditions.IsReady(ro) && images == "echo:"+tag+" x4",
			fmt.Sprintf("Rollout %s stable %s, pods %s", ro.Status.Phase, ro.Status.StableRevision, images), err
	}))
	s.p.step("released: 4 pods of echo:%s, before any pipeline applied the merge", tag)
}

// ciRendersTheApproval runs the pipeline on the merge: the Rollout gets the
// approval in spec.approvals; nothing is released again.
func (s *helmStory) ciRendersTheApproval(gate *v1alpha1.Rollout, tag string) {
	s.helmCLI("upgrade", "--install", App, s.checkout(), "-n", Namespace, "--wait", "--timeout", "2m")
	ro, err := s.rollout(s.ctx)
	s.must(err)
	want := gate.Status.CanaryRevision
	if len(ro.Spec.Approvals) != 1 || ro.Spec.Approvals[0].Revision != want || ro.Spec.Approvals[0].Step != 1 {
		s.t.Errorf("spec.approvals after the pipeline ran on the merge: %+v, want the approval of %s step 1", ro.Spec.Approvals, want)
	}
	s.must(s.until(time.Minute, "the Rollout to observe the rendered approval", func(ctx context.Context) (bool, string, error) {
		ro, err := s.rollout(ctx)
		if err != nil {
			return false, "", err
		}
		images, err := s.images(ctx)
		return ro.Status.ObservedGeneration == ro.Generation && ro.Status.Phase == v1alpha1.PhaseHealthy &&
				ro.Status.CanaryRevision == want && images == "echo:"+tag+" x4",
			fmt.Sprintf("Rollout %s canary %s generation %d/%d, pods %s", ro.Status.Phase, ro.Status.CanaryRevision,
				ro.Status.ObservedGeneration, ro.Generation, images), err
	}))
	s.p.step("CI: helm upgrade of the merge renders %d approval into the Rollout; nothing moves", len(ro.Spec.Approvals))
}

// helmRollbackAtTheGate runs `helm rollback` to revision while a gate
// waits: rollgate rolls the release back and ends Healthy, reason
// RolledBack, with every pod on the old version.
func (s *helmStory) helmRollbackAtTheGate(revision int, old string) {
	s.helmCLI("rollback", App, fmt.Sprint(revision), "-n", Namespace, "--wait", "--timeout", "2m")
	s.p.step("CI: helm rollback %s %d at the gate", App, revision)
	s.must(s.until(2*time.Minute, "the release to be rolled back", func(ctx context.Context) (bool, string, error) {
		ro, err := s.rollout(ctx)
		if err != nil {
			return false, "", err
		}
		images, err := s.images(ctx)
		reason := conditions.GetReason(ro, v1alpha1.ReadyCondition)
		return ro.Status.Phase == v1alpha1.PhaseHealthy && conditions.IsReady(ro) && reason == v1alpha1.ReasonRolledBack && images == "echo:"+old+" x4",
			fmt.Sprintf("Rollout %s (%s), pods %s", ro.Status.Phase, reason, images), err
	}))
	s.p.step("rolled back: 4 pods of echo:%s, the Rollout Healthy (RolledBack)", old)
}

// checkout writes the chart as Git holds it on main into a fresh folder,
// as a pipeline's checkout does, and returns the chart's folder.
func (s *helmStory) checkout() string {
	dir := filepath.Join(s.t.TempDir(), "checkout")
	for path := range chartFiles() {
		data, err := s.git.ReadFile(RepoName, Branch, path)
		s.must(err)
		p := filepath.Join(dir, path)
		s.must(os.MkdirAll(filepath.Dir(p), 0o755))
		s.must(os.WriteFile(p, []byte(data), 0o644))
	}
	return filepath.Join(dir, chartPath)
}

// helmCLI runs bin/helm against the cluster.
func (s *helmStory) helmCLI(args ...string) string {
	s.t.Helper()
	helm, err := repo.LookTool("helm")
	if err != nil {
		s.t.Fatalf("%v (make tools-helm)", err)
	}
	home := s.t.TempDir()
	cmd := exec.CommandContext(s.ctx, helm, append(args, "--kubeconfig", s.cluster.Kubeconfig)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		s.t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// helmStatus is the status `helm status` reports for the release.
func (s *helmStory) helmStatus() string {
	var st struct {
		Info struct {
			Status string `json:"status"`
		} `json:"info"`
	}
	s.must(json.Unmarshal([]byte(s.helmCLI("status", App, "-n", Namespace, "-o", "json")), &st))
	return st.Info.Status
}
