// Package demo runs rollgate's whole story on one machine, for the
// rollgate-demo command (`make demo`, cmd/rollgate-demo) and for its test: a simulated Kubernetes cluster
// (kwok), a Git server on loopback holding an application, Flux's
// source-controller and kustomize-controller applying it, and the rollgate
// controller binary. A developer bumps the image in Git; Flux applies it;
// rollgate releases it step by step and opens an approval branch; a user
// merges it; the release completes; and its status is read back from Git.
//
// Everything runs as local processes on 127.0.0.1 and is torn down when Run
// returns, including on Ctrl-C (cancel the context).
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/rollgate/rollgate/test/repo"
)

// Options configure Run.
type Options struct {
	// Interactive waits for the user to approve the first step (by merging
	// the approval branch with git, or with `rollgate approve`), instead of
	// merging it after ApprovalDelay.
	Interactive bool
	// Keep leaves everything running after the release, prints how to
	// connect, and tears down only when ctx is cancelled (Ctrl-C).
	Keep bool
	// Out receives the story; nil means os.Stdout.
	Out io.Writer
	// Rollgate is the rollgate binary run as the controller and for
	// `rollgate status`; "" means the rollgate next to the running
	// executable (bin/rollgate-demo beside bin/rollgate), else bin/rollgate
	// of the checkout.
	Rollgate string
	// ApprovalDelay is how long the approval branch stays open before it
	// is merged when not Interactive; 0 means 3 seconds.
	ApprovalDelay time.Duration
	// Timeout bounds the demo without Keep (setup and release, not the
	// user's time in Interactive mode); 0 means 10 minutes.
	Timeout time.Duration
}

func (o Options) withDefaults() (Options, error) {
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Rollgate == "" {
		o.Rollgate = defaultRollgate()
	}
	if o.ApprovalDelay == 0 {
		o.ApprovalDelay = 3 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	return o, nil
}

// defaultRollgate returns the rollgate binary next to the running
// executable when there is one, else bin/rollgate of the checkout (`go run
// ./cmd/rollgate-demo` runs from a temporary folder).
func defaultRollgate() string {
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "rollgate"); isExecutable(p) {
			return p
		}
	}
	return filepath.Join(repo.ToolsDir(), "rollgate")
}

func isExecutable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && !info.IsDir() && info.Mode()&0o111 != 0
}

// Run runs the demo and tears everything down before it returns. It
// returns nil when the release completed and Git reports it Healthy, and
// ctx.Err() when ctx was cancelled (with Keep, only before the release
// completed).
func Run(ctx context.Context, opts Options) (err error) {
	w, err := newWorld(opts)
	if err != nil {
		return err
	}
	opts = w.opts
	completed := false
	defer func() {
		switch {
		case ctx.Err() != nil && !completed: // Ctrl-C, whatever it broke on its way
			err = ctx.Err()
			fmt.Fprintln(opts.Out, "\ninterrupted")
		case err != nil:
			fmt.Fprintf(opts.Out, "\nthe demo failed: %v\n%s", err, w.failureReport())
		}
		fmt.Fprintln(opts.Out, "\ntearing down: controllers, Flux, cluster, Git server, temporary files")
		down := time.Now()
		if cerr := w.close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", cerr))
		}
		fmt.Fprintf(opts.Out, "done in %s (teardown %s)\n",
			time.Since(w.p.start).Round(100*time.Millisecond), time.Since(down).Round(100*time.Millisecond))
	}()
	fmt.Fprintf(opts.Out, "rollgate demo: release %s of %s with Flux applying Git and rollgate gating each step\n", NewImage, App)
	runCtx := ctx
	if !opts.Interactive && !opts.Keep {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	if err := w.setup(runCtx); err != nil {
		return err
	}
	if err := w.release(runCtx); err != nil {
		return err
	}
	if opts.Keep {
		w.printConnect()
		completed = true // Ctrl-C now ends the demo: not an interruption
		<-ctx.Done()
	}
	return nil
}

// newWorld checks the tools and creates the world's temporary folder;
// nothing runs yet. The caller must close it.
func newWorld(opts Options) (*world, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	w := &world{opts: opts, p: &printer{out: opts.Out, start: time.Now()}}
	if w.tools, err = findTools(opts.Rollgate); err != nil {
		return nil, err
	}
	removeStale()
	if w.tmp, err = os.MkdirTemp("", tmpPattern); err != nil {
		return nil, err
	}
	if err := claimTmp(w.tmp); err != nil {
		return nil, errors.Join(err, os.RemoveAll(w.tmp))
	}
	return w, nil
}

// setup starts the platform: cluster, Git, Flux, rollgate; then lets Flux
// apply version 1 of the application.
func (w *world) setup(ctx context.Context) error {
	w.p.section("the platform")
	if err := w.startCluster(ctx); err != nil {
		return err
	}
	if err := w.startGit(); err != nil {
		return err
	}
	if err := w.startFlux(ctx); err != nil {
		return err
	}
	if err := w.startRollgate(ctx); err != nil {
		return err
	}
	w.p.section("version 1, applied by Flux")
	if err := w.syncWithFlux(ctx); err != nil {
		return err
	}
	head, err := w.git.Head(RepoName, Branch)
	if err != nil {
		return err
	}
	if err := w.waitFluxApplied(ctx, head); err != nil {
		return err
	}
	return w.waitV1(ctx)
}

// printConnect says how to look at the running demo (Options.Keep).
func (w *world) printConnect() {
	fmt.Fprintf(w.p.out, `
everything keeps running; press Ctrl-C to tear it down. From another terminal:

  export KUBECONFIG=%s
  %s get -n %s                      # the Rollout (kubectl works too)
  %s status --repo %s    # the status, from Git
  git clone %s                                   # the repository

  logs: %s/*.log
`, w.cluster.Kubeconfig, w.tools.rollgate, Namespace, w.tools.rollgate, w.repoURL, w.repoURL, w.tmp)
}
