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

// waitForUser prints how to approve and waits until main holds the
// approval, however it got there.
func (w *world) waitForUser(ctx context.Context, gate v1alpha1.ApprovalRequest) error {
	clone := w.tmp + "/app"
	fmt.Fprintf(w.p.out, `
  The release waits for you. Approve step %d in Git, from another terminal, either
  by merging the approval branch into %s (what merging its pull request does):

    git clone -q %s %s && cd %s
    git merge --no-edit origin/%s && git push -q origin %s

  or with the rollgate CLI, which commits the approval straight to %s:

    %s approve %s/%s --repo %s --direct

`, gate.Step, Branch, w.repoURL, clone, clone, gate.Branch, Branch, Branch, w.tools.rollgate, Namespace, App, w.repoURL)
	w.p.step("waiting until %s holds the approval (Ctrl-C ends the demo) ...", Branch)
	_, err := w.watchUntil(ctx, 24*time.Hour, "the approval in "+Branch, func(context.Context, *observation) (bool, error) {
		manifest, err := w.git.ReadFile(RepoName, Branch, rolloutFile)
		if err != nil {
			return false, err
		}
		approvals, err := gitsync.ApprovalsIn([]byte(manifest), Namespace, App)
		if err != nil {
			return false, err
		}
		want := gitsync.Approval{Revision: gate.Revision, Step: int(gate.Step), Attempt: int(gate.Attempt)}
		return gitsync.HasApproval(approvals, want), nil
	})
	if err != nil {
		return err
	}
	head, err := w.git.Head(RepoName, Branch)
	if err != nil {
		return err
	}
	w.p.step("you approved: %s is now at %s and holds the approval of step %d", Branch, short(head), gate.Step)
	return nil
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
