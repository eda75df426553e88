package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rollgate/rollgate/gitsync"
)

// historyOutput is the -o json form of `rollgate history`: the releases
// read from Git and the DORA figures computed from them.
type historyOutput struct {
	History gitsync.History `json:"history"`
	DORA    gitsync.DORA    `json:"dora"`
}

func newHistoryCommand() *cobra.Command {
	f := &gitFlags{}
	var output, until string
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "history <namespace>/<name> --repo <url>",
		Short: "Print a Rollout's releases and DORA figures from the history of its status file in Git",
		Long: `Read the history of a Rollout's status file on the status branch and print,
per release: the canary revision and images, each step's start and end, the
gates and how they were opened, the analysis verdicts, the outcome and the
revert branch; then the four DORA figures over the window. No cluster access
is needed.

The window is --since before --until (default now). The whole status branch
is downloaded, but only the commits inside the window are read, plus the
last one before it (the state at its start). What the status file does not
record (who approved, reviews, signatures) is printed as "not recorded".

Exit codes: 0 ok, 1 error, 2 bad usage, 3 the Rollout has no status file on the branch.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return usageError{fmt.Errorf("-o %q: use text or json", output)}
			}
			ns, name, ok := strings.Cut(args[0], "/")
			if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
				return usageError{fmt.Errorf("%q: name the Rollout as <namespace>/<name>", args[0])}
			}
			if since < 0 {
				return usageError{fmt.Errorf("--since %s: must not be negative", since)}
			}
			end := time.Now().UTC()
			if until != "" {
				t, err := time.Parse(time.RFC3339, until)
				if err != nil {
					return usageError{fmt.Errorf("--until %q: use an RFC 3339 time such as 2026-03-01T12:00:00Z", until)}
				}
				end = t.UTC()
			}
			var start time.Time
			if since > 0 {
				start = end.Add(-since)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			repo, err := f.open()
			if err != nil {
				return err
			}
			h, err := gitsync.ReadHistory(ctx, repo, gitsync.HistoryOptions{
				Branch: f.statusBranch, Prefix: f.pathPrefix, Namespace: ns, Name: name, Since: start, SourceTimes: true,
			})
			if errors.Is(err, gitsync.ErrFileNotFound) || errors.Is(err, gitsync.ErrBranchNotFound) {
				return notFoundError{fmt.Errorf("no status for Rollout %s in Git: %w", args[0], err)}
			}
			if err != nil {
				return err
			}
			out := historyOutput{History: h, DORA: gitsync.ComputeDORA(h.Releases, start, end)}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			return printHistory(cmd.OutOrStdout(), out)
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVar(&f.statusBranch, "branch", gitsync.DefaultStatusBranch, "Same as --status-branch")
	cmd.Flags().DurationVar(&since, "since", 720*time.Hour, "Read the history back to this long before --until; 0 reads the whole branch")
	cmd.Flags().StringVar(&until, "until", "", "End of the window, RFC 3339 (default now)")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "Output format: text or json")
	return cmd
}

func printHistory(w io.Writer, out historyOutput) error {
	h, d := out.History, out.DORA
	window := "the whole branch"
	if !h.Since.IsZero() {
		window = "back to " + stamp(h.Since)
	}
	fmt.Fprintf(w, "Rollout %s/%s: %d versions of its status file in %d commits of %s at %s, %s\n",
		h.Namespace, h.Name, h.Versions, h.Commits, h.Branch, short(h.Head), window)
	if h.Incomplete {
		fmt.Fprintln(w, "(the status branch's history starts inside the window: nothing older was read)")
	}
	for _, r := range h.Releases {
		ended := ""
		if !r.Ended.IsZero() {
			ended = " " + stamp(r.Ended)
		}
		fmt.Fprintf(w, "\nRELEASE %s (stable %s): %s%s\n", r.Revision, dash(r.Stable), r.Outcome, ended)
		fmt.Fprintf(w, "  images: %s\n", dash(strings.Join(r.Images, ", ")))
		first := stamp(r.FirstSeen)
		if r.StartedBeforeWindow {
			first = "before the window (state at " + first + ")"
		}
		src := gitsync.NotRecorded
		if r.SourceCommit != "" {
			src = short(r.SourceCommit) + " (time " + gitsync.NotRecorded + ")"
			if !r.SourceCommitTime.IsZero() {
				src = short(r.SourceCommit) + " at " + stamp(r.SourceCommitTime)
			}
		}
		fmt.Fprintf(w, "  first seen %s; source commit %s\n", first, src)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  STEP\tSTART\tEND\tSTATES")
		for _, s := range r.Steps {
			fmt.Fprintf(tw, "  %d/%d\t%s\t%s\t%s\n", s.Step, s.Total, stamp(s.Start), stamp(s.End), strings.Join(s.States, " > "))
		}
		if len(r.Gates) > 0 {
			fmt.Fprintln(tw, "  GATE\tWAITING\tAPPROVED\tOPENED\tHOW")
		}
		for _, g := range r.Gates {
			step := fmt.Sprint(g.Step)
			if g.Attempt > 1 {
				step += fmt.Sprintf(" (attempt %d)", g.Attempt)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", step, stamp(g.Waiting), stamp(g.Approved), stamp(g.Opened), g.How)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, m := range r.Analysis {
			fmt.Fprintf(w, "  analysis %s: %s %s at %s\n", m.Name, m.Phase, m.Value, stamp(m.Time))
		}
		if r.Outcome == gitsync.OutcomeRolledBack {
			fmt.Fprintf(w, "  revert: %s\n", cmpOrDash(r.Revert, "no revert branch on the remote (the status file does not record it)"))
		}
	}
	fmt.Fprintf(w, "\nDORA from %s to %s (%.1f days):\n", stamp(d.Since), stamp(d.Until), d.Until.Sub(d.Since).Hours()/24)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, x := range []struct {
		name string
		f    gitsync.Figure
	}{{"deployment frequency", d.DeploymentFrequency}, {"lead time", d.LeadTime}, {"change failure rate", d.ChangeFailureRate}, {"time to restore", d.TimeToRestore}} {
		v := "-"
		if x.f.Value != nil {
			v = fmt.Sprintf("%.2f", *x.f.Value)
		}
		note := ""
		if x.f.Note != "" {
			note = " (" + x.f.Note + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s %s\tfrom %d releases%s\n", x.name, v, x.f.Unit, x.f.Count, note)
	}
	return tw.Flush()
}

// stamp prints a time in UTC to the second, "-" for none.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func cmpOrDash(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}
