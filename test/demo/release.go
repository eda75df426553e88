package demo

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// waitV1 waits until version 1 runs and rollgate has taken the Deployment
// under its control.
func (w *world) waitV1(ctx context.Context) error {
	w.header()
	o, err := w.watchUntil(ctx, 90*time.Second, "version 1 running and the Rollout Ready", func(_ context.Context, o *observation) (bool, error) {
		return o.ro != nil && conditions.IsReady(o.ro) && o.pods[OldImage] == [2]int{5, 5} &&
			o.deployment != nil && o.deployment.Labels[v1alpha1.LabelControlled] != "", nil
	})
	if err != nil {
		return err
	}
	w.p.step("version 1 (%s) runs: 5/5 pods ready, Rollout %s/%s Ready at revision %s", OldImage, Namespace, App, o.ro.Status.StableRevision)
	return nil
}

// release is the story: an image bump in Git, the steps, the approval
// merged in Git, completion and the status read back from Git.
func (w *world) release(ctx context.Context) error {
	w.p.section(fmt.Sprintf("the release: %s -> %s", OldImage, NewImage))
	commit, err := w.git.Commit(RepoName, Branch, "echoserver: release 2.0", map[string]string{deploymentFile: deploymentYAML(NewImage)})
	if err != nil {
		return err
	}
	w.p.step("developer: pushed %s to %s: %s image %s -> %s", short(commit), Branch, deploymentFile, OldImage, NewImage)
	w.header()
	o, err := w.watchUntil(ctx, 3*time.Minute, "step 1 to wait for approval", func(_ context.Context, o *observation) (bool, error) {
		return o.ro != nil && o.ro.Status.AwaitingApproval != nil && o.ro.Status.AwaitingApproval.Branch != "", nil
	})
	if err != nil {
		return err
	}
	gate := *o.ro.Status.AwaitingApproval
	head, err := w.git.Head(RepoName, gate.Branch)
	if err != nil {
		return err
	}
	w.p.step("rollgate pushed the approval branch %s (%s): it adds {revision: %s, step: %d} to spec.approvals in %s",
		gate.Branch, short(head), gate.Revision, gate.Step, rolloutFile)
	if err := w.approve(ctx, gate); err != nil {
		return err
	}
	if err := w.waitComplete(ctx, o.ro.Status.StableRevision, gate.Revision); err != nil {
		return err
	}
	return w.showGitStatus(ctx, gate.Revision)
}

// approve merges the approval branch after a short pause, or waits for
// the user to approve (Options.Interactive).
func (w *world) approve(ctx context.Context, gate v1alpha1.ApprovalRequest) error {
	if w.opts.Interactive {
		return w.waitForUser(ctx, gate)
	}
	w.p.step("reviewer: looking at the approval branch for %s ...", w.opts.ApprovalDelay)
	until := time.Now().Add(w.opts.ApprovalDelay)
	if _, err := w.watchUntil(ctx, w.opts.ApprovalDelay+time.Minute, "the reviewer", func(context.Context, *observation) (bool, error) {
		return time.Now().After(until), nil // the live view goes on meanwhile
	}); err != nil {
		return err
	}
	msg := fmt.Sprintf("Merge branch '%s'\n\nApprove step %d of %s/%s (revision %s).", gate.Branch, gate.Step, Namespace, App, gate.Revision)
	merged, err := w.git.Merge(RepoName, Branch, gate.Branch, msg)
	if err != nil {
		return err
	}
	w.p.step("reviewer: merged %s into %s (%s), as a pull request is merged", gate.Branch, Branch, short(merged))
	return nil
}

// waitForUser prints how to look at the release and how to approve it,
// and waits until the approval is in Git or in the cluster, however it got
// there.
func (w *world) waitForUser(ctx context.Context, gate v1alpha1.ApprovalRequest) error {
	fmt.Fprint(w.p.out, w.approvalHelp(gate))
	w.p.step("waiting until %s or the Rollout holds the approval (Ctrl-C ends the demo) ...", Branch)
	inCluster := false
	_, err := w.watchUntil(ctx, 24*time.Hour, "the approval", func(_ context.Context, o *observation) (bool, error) {
		if o.ro != nil {
			for _, a := range o.ro.Spec.Approvals {
				if a.Approves(gate.Revision, gate.Attempt, gate.Step) {
					inCluster = true
				}
			}
		}
		manifest, err := w.git.ReadFile(RepoName, Branch, rolloutFile)
		if err != nil {
			return false, err
		}
		approvals, err := gitsync.ApprovalsIn([]byte(manifest), Namespace, App)
		if err != nil {
			return false, err
		}
		want := gitsync.Approval{Revision: gate.Revision, Step: int(gate.Step), Attempt: int(gate.Attempt)}
		return inCluster || gitsync.HasApproval(approvals, want), nil
	})
	if err != nil {
		return err
	}
	if inCluster {
		w.p.step("you approved step %d in the cluster (spec.approvals of %s/%s); Git does not record it", gate.Step, Namespace, App)
		return nil
	}
	head, err := w.git.Head(RepoName, Branch)
	if err != nil {
		return err
	}
	w.p.step("you approved: %s is now at %s and holds the approval of step %d", Branch, short(head), gate.Step)
	return nil
}

// approvalHelp says, with the real paths and URLs, how to look at the
// waiting release from another terminal and the ways to approve it.
func (w *world) approvalHelp(gate v1alpha1.ApprovalRequest) string {
	clone := w.tmp + "/app"
	rg := w.tools.rollgate
	return fmt.Sprintf(`
  The release waits for you at step %[1]d. From another terminal, look at it:

    export KUBECONFIG=%[2]s
    %[3]s get -n %[4]s -w   # the Rollout, redrawn every 2 s (kubectl works too)
    %[3]s status --repo %[5]s   # the same, read from Git

  then approve step %[1]d in Git, either by merging the approval branch into %[6]s
  (what merging its pull request does):

    git clone -q %[5]s %[7]s && cd %[7]s
    git merge --no-edit origin/%[8]s && git push -q origin %[6]s

  or with the rollgate CLI, which commits the approval straight to %[6]s:

    %[3]s approve %[4]s/%[9]s --repo %[5]s --direct

  or in the cluster only (spec.approvals; Git does not record it):

    %[3]s approve %[4]s/%[9]s

`, gate.Step, w.cluster.Kubeconfig, rg, Namespace, w.repoURL, Branch, clone, gate.Branch, App)
}

// waitComplete waits until every pod runs the new revision, the traffic is
// back to what Git declares and the Rollout is Healthy again.
func (w *world) waitComplete(ctx context.Context, oldRevision, newRevision string) error {
	_, err := w.watchUntil(ctx, 3*time.Minute, "the release to complete", func(_ context.Context, o *observation) (bool, error) {
		ro := o.ro
		return ro != nil && ro.Status.Phase == v1alpha1.PhaseHealthy && conditions.IsReady(ro) &&
			ro.Status.StableRevision == newRevision && ro.Status.CanaryRevision == newRevision &&
			o.pods[NewImage] == [2]int{5, 5} && o.pods[OldImage][1] == 0 &&
			o.deployment != nil && !o.deployment.Spec.Paused && o.stable == 100, nil
	})
	if err != nil {
		return err
	}
	w.p.step("release complete: revision %s replaced %s; 5/5 pods run %s; the HTTPRoute is back to what Git declares",
		newRevision, oldRevision, NewImage)
	return nil
}

// showGitStatus waits until Git reports the release finished, then prints
// what `rollgate status --repo` reads from Git.
func (w *world) showGitStatus(ctx context.Context, revision string) error {
	repo, err := gitsync.Open(gitsync.Options{URL: w.repoURL})
	if err != nil {
		return err
	}
	err = w.waitFor(ctx, time.Minute, "Healthy status in Git", func(ctx context.Context) (bool, error) {
		states, err := gitsync.ReadStatus(ctx, repo, StatusBranch)
		if err != nil {
			return false, nil // the branch may lag behind; try again
		}
		for _, s := range states {
			if s.Namespace == Namespace && s.Name == App {
				return s.Phase == string(v1alpha1.PhaseHealthy) && s.Stable.Revision == revision, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	w.p.section("the status, read from Git alone")
	w.p.step("$ rollgate status --repo %s", w.repoURL)
	cmd := exec.CommandContext(ctx, w.tools.rollgate, "status", "--repo", w.repoURL)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("rollgate status: %w: %s", err, out.String())
	}
	w.p.block(out.String())
	return nil
}
