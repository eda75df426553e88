package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// gitFlags select a repository for the commands that work from Git alone.
type gitFlags struct {
	repo         string
	statusBranch string
	pathPrefix   string
	identityFile string
	knownHosts   string
	insecureHTTP bool
	timeout      time.Duration
}

func (f *gitFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.repo, "repo", "", "URL of the Git repository (https://, http://, ssh:// or git@host:path); credentials come from $ROLLGATE_GIT_USERNAME with $ROLLGATE_GIT_PASSWORD or $ROLLGATE_GIT_TOKEN, or --identity-file")
	fs.StringVar(&f.statusBranch, "status-branch", gitsync.DefaultStatusBranch, "Branch holding rollgate's status files")
	fs.StringVar(&f.pathPrefix, "status-path", "", "Directory of the status files: the Repository's spec.status.path and/or spec.status.cluster (<path>/<cluster>)")
	fs.StringVar(&f.identityFile, "identity-file", "", "SSH private key for ssh:// URLs")
	fs.StringVar(&f.knownHosts, "known-hosts-file", "", "known_hosts file for ssh:// URLs (required with --identity-file)")
	insecure, _ := strconv.ParseBool(os.Getenv("ROLLGATE_GIT_INSECURE_HTTP"))
	fs.BoolVar(&f.insecureHTTP, "insecure-http", insecure, "Allow sending credentials over plain http:// (local test servers only; default from $ROLLGATE_GIT_INSECURE_HTTP)")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "Give up after this long")
}

// open returns the repository, with credentials from the environment and files.
func (f *gitFlags) open() (*gitsync.Repository, error) {
	if f.repo == "" {
		return nil, usageError{fmt.Errorf("--repo is required")}
	}
	data := map[string][]byte{}
	for env, key := range map[string]string{"ROLLGATE_GIT_USERNAME": "username", "ROLLGATE_GIT_PASSWORD": "password", "ROLLGATE_GIT_TOKEN": "token"} {
		if v := os.Getenv(env); v != "" {
			data[key] = []byte(v)
		}
	}
	for file, key := range map[string]string{f.identityFile: "identity", f.knownHosts: "known_hosts"} {
		if file == "" {
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, usageError{err}
		}
		data[key] = b
	}
	var creds *gitsync.Credentials
	if len(data) > 0 {
		c, err := gitsync.CredentialsFromSecret(data)
		if err != nil {
			return nil, usageError{err}
		}
		creds = c
	}
	return gitsync.Open(gitsync.Options{URL: f.repo, Credentials: creds, InsecureHTTP: f.insecureHTTP})
}

// readStates reads every Rollout's status file from Git.
func (f *gitFlags) readStates(ctx context.Context) ([]gitsync.RolloutState, error) {
	repo, err := f.open()
	if err != nil {
		return nil, err
	}
	return gitsync.ReadStatusAt(ctx, repo, f.statusBranch, f.pathPrefix)
}

func newGitStatusCommand() *cobra.Command {
	f := &gitFlags{}
	var output string
	cmd := &cobra.Command{
		Use:   "status --repo <url> [namespace/name]",
		Short: "Print the state of Rollouts from Git alone, without cluster access",
		Long: `Read rollgate's status files from the status branch (rollgate/status by
default) of a Git repository and print the state of every Rollout, or of one.
No cluster access is needed: this is what rollgate last wrote to Git.

Exit codes: 0 ok, 1 error, 2 bad usage, 3 the named Rollout has no status in Git.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			states, err := f.readStates(ctx)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				states, err = pickState(states, args[0])
				if err != nil {
					return err
				}
			}
			return printStates(cmd.OutOrStdout(), states, output)
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "table", "Output format: table, yaml or json")
	return cmd
}

func pickState(states []gitsync.RolloutState, ref string) ([]gitsync.RolloutState, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok {
		return nil, usageError{fmt.Errorf("%q: name the Rollout as <namespace>/<name>", ref)}
	}
	for _, s := range states {
		if s.Namespace == ns && s.Name == name {
			return []gitsync.RolloutState{s}, nil
		}
	}
	return nil, notFoundError{fmt.Errorf("no status for Rollout %s in Git", ref)}
}

func printStates(w io.Writer, states []gitsync.RolloutState, output string) error {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(states)
	case "yaml":
		b, err := yaml.Marshal(states)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "table", "":
	default:
		return usageError{fmt.Errorf("-o %q: use table, yaml or json", output)}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tPHASE\tSTEP\tSTATE\tTRAFFIC\tSTABLE\tCANARY\tWAITING FOR")
	for _, s := range states {
		step := "-"
		if s.Step.Total > 0 {
			step = fmt.Sprintf("%d/%d", s.Step.Current, s.Step.Total)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d%%\t%s\t%s\t%s\n", s.Namespace, s.Name, dash(s.Phase), step,
			dash(s.Step.State), s.Canary.TrafficPercent, pods(s.Stable), pods(s.Canary), waitingFor(s))
	}
	return tw.Flush()
}

func pods(v gitsync.VersionState) string {
	if v.Revision == "" {
		return "-"
	}
	return fmt.Sprintf("%s (%d/%d ready)", v.Revision, v.ReadyReplicas, v.Replicas)
}

// waitingFor says in a few words what a release waits for, from its
// status file alone: an approval, a place in a budget's queue, the
// upstream waves it waits for, a freeze or window, a hook, or the other
// members of its lockstep group.
func waitingFor(s gitsync.RolloutState) string {
	if a := s.AwaitingApproval; a != nil {
		if a.PullRequestURL != "" {
			return "approval: merge " + a.PullRequestURL
		}
		return "approval: merge branch " + a.Branch
	}
	if q := s.Queue; q != nil {
		return fmt.Sprintf("budget %s: position %d in the queue", q.Budget, q.Position)
	}
	switch s.Reason {
	case v1alpha1.ReasonWaitingForFleet:
		return "fleet: " + strings.Join(s.WaitsFor, ", ")
	case v1alpha1.ReasonWaitingForFreeze:
		return "freeze: " + afterColon(s.Message)
	case v1alpha1.ReasonWaitingForHook:
		return "hook: " + afterColon(s.Message)
	case v1alpha1.ReasonWaitingForGroup:
		return "group: " + afterColon(s.Message)
	}
	if s.Group != "" && s.Step.Total > 0 && s.Phase != "Healthy" {
		return "its own step, in lockstep group " + s.Group
	}
	return "-"
}

// afterColon is a message without the "revision X waits to be released:"
// or "step 1/3 of X waits before step 2:" it starts with.
func afterColon(msg string) string {
	if _, rest, ok := strings.Cut(msg, ": "); ok {
		return rest
	}
	return msg
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newGitApproveFlags(cmd *cobra.Command) (*gitFlags, *string, *bool, *string) {
	f := &gitFlags{}
	f.register(cmd.Flags())
	branch := cmd.Flags().String("branch", "", "Tracked branch holding the Rollout manifest (default: the one in the status file)")
	direct := cmd.Flags().Bool("direct", false, "Commit the approval straight to the tracked branch instead of pushing an approval branch to merge")
	by := cmd.Flags().String("by", os.Getenv("USER"), "Who approves, recorded in the commit message")
	return f, branch, direct, by
}

// approveInGit records the approval of the gate a Rollout waits at, as the
// status file in Git describes it.
func approveInGit(ctx context.Context, w io.Writer, f *gitFlags, ref, branch string, direct bool, by string) error {
	states, err := f.readStates(ctx)
	if err != nil {
		return err
	}
	picked, err := pickState(states, ref)
	if err != nil {
		return err
	}
	s := picked[0]
	if s.AwaitingApproval == nil {
		return fmt.Errorf("Rollout %s is not waiting for approval (phase %s, step %d/%d)", ref, dash(s.Phase), s.Step.Current, s.Step.Total)
	}
	if s.Git.Path == "" {
		return fmt.Errorf("the status of %s does not say where its manifest lives: set spec.git on the Rollout", ref)
	}
	if branch == "" {
		branch = s.Git.Branch
	}
	repo, err := f.open()
	if err != nil {
		return err
	}
	a := s.AwaitingApproval
	approval := gitsync.Approval{Revision: a.Revision, Step: a.Step, Attempt: a.Attempt}
	rev := revisionOf(a.Revision, int32(a.Attempt))
	// The same pruning as the controller's: entries of revisions that are
	// neither stable nor canary go (docs/git.md).
	live := []string{s.Stable.Revision, s.Canary.Revision}
	if direct {
		commit, err := gitsync.RecordApproval(ctx, repo, branch, s.Git.Path, s.Namespace, s.Name, approval, by, live...)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "approved step %d of %s (%s) in commit %s on %s\n", a.Step, ref, rev, short(commit), branch)
		return err
	}
	p, err := gitsync.ProposeApproval(ctx, repo, branch, s.Git.Path, s.Namespace, s.Name, approval, by, live...)
	if err != nil {
		return err
	}
	if p.AlreadyApproved {
		_, err = fmt.Fprintf(w, "step %d of %s (%s) is already approved on %s\n", a.Step, ref, rev, branch)
		return err
	}
	_, err = fmt.Fprintf(w, "approval branch %s is ready: merge it into %s to approve step %d of %s\n", p.Branch, branch, a.Step, ref)
	return err
}

// revisionOf names the release a gate belongs to: "revision 5c7d9f8b6d",
// or "revision 5c7d9f8b6d, attempt 2" after a retry.
func revisionOf(revision string, attempt int32) string {
	if attempt > 1 {
		return fmt.Sprintf("revision %s, attempt %d", revision, attempt)
	}
	return "revision " + revision
}

func short(commit string) string {
	if len(commit) > 10 {
		return commit[:10]
	}
	return commit
}
