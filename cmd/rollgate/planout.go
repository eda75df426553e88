package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/rollgate/rollgate/strategy/plantext"
)

// printPlan prints the report as a table, Markdown (for a pull request
// comment) or JSON.
func printPlan(w io.Writer, r planReport, output string) error {
	switch output {
	case "json":
		if r.Rollouts == nil {
			r.Rollouts = []rolloutPlan{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "markdown":
		printMarkdown(w, r)
		return nil
	}
	return printTable(w, r)
}

func printTable(w io.Writer, r planReport) error {
	for _, inv := range r.Invalid {
		fmt.Fprintf(w, "INVALID %s %s/%s (%s)\n", inv.Kind, inv.Namespace, inv.Name, inv.Source)
		for _, e := range inv.Errors {
			fmt.Fprintf(w, "  %s\n", e)
		}
		fmt.Fprintln(w)
	}
	if len(r.Rollouts) == 0 && len(r.Invalid) == 0 {
		fmt.Fprintln(w, "no Rollout in these files")
	}
	for i, p := range r.Rollouts {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "Rollout %s/%s (%s)\n", p.Namespace, p.Name, p.Source)
		fmt.Fprintf(w, "  %s\n", p.describe())
		if p.Release != nil {
			fmt.Fprintf(w, "  change against %s: %s\n", r.Base, p.Release.text())
		}
		for _, n := range p.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		if p.Error != "" {
			fmt.Fprintf(w, "  cannot plan the steps: %s\n", p.Error)
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "  STEP\tNEW\tOLD\tTRAFFIC\tPAUSE\tANALYSIS\n")
		for _, s := range p.Steps {
			n, o := p.counts(s)
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", s.Step, n, o,
				dash(plantext.TrafficText(s.Traffic, len(p.Routers) > 1)), dash(pauseText(s)), dash(strings.Join(s.Analysis, ", ")))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, g := range r.Groups {
		fmt.Fprintf(w, "\n%s\n", strings.ToUpper(g.text()[:1])+g.text()[1:])
	}
	return nil
}

func printMarkdown(w io.Writer, r planReport) {
	fmt.Fprintln(w, "### rollgate plan")
	fmt.Fprintln(w)
	if len(r.Invalid) > 0 {
		fmt.Fprintf(w, "**%d object(s) would be refused by the API server:**\n\n", len(r.Invalid))
		for _, inv := range r.Invalid {
			fmt.Fprintf(w, "- `%s %s/%s` (`%s`)\n", inv.Kind, inv.Namespace, inv.Name, inv.Source)
			for _, e := range inv.Errors {
				fmt.Fprintf(w, "  - %s\n", plantext.Cell(e))
			}
		}
		fmt.Fprintln(w)
	}
	if len(r.Warnings) > 0 {
		fmt.Fprintf(w, "**%d warning(s):**\n\n", len(r.Warnings))
		for _, wa := range r.Warnings {
			fmt.Fprintf(w, "- `%s %s/%s` (`%s`): %s\n", wa.Kind, wa.Namespace, wa.Name, wa.Source, plantext.Cell(wa.Message))
		}
		fmt.Fprintln(w)
	}
	if len(r.Rollouts) == 0 {
		fmt.Fprintln(w, "No Rollout in these files.")
		return
	}
	if r.Base != "" {
		fmt.Fprintf(w, "| Rollout | Against `%s` |\n|---|---|\n", r.Base)
		for _, p := range r.Rollouts {
			fmt.Fprintf(w, "| `%s/%s` | %s |\n", p.Namespace, p.Name, plantext.Cell(p.Release.markdown()))
		}
		fmt.Fprintln(w)
	}
	for _, p := range r.Rollouts {
		fmt.Fprintf(w, "#### Rollout `%s/%s`\n\n%s\n\n", p.Namespace, p.Name, plantext.Cell(p.describe()))
		for _, n := range p.Notes {
			fmt.Fprintf(w, "> %s\n\n", plantext.Cell(n))
		}
		if p.Error != "" {
			fmt.Fprintf(w, "Cannot plan the steps: %s\n\n", plantext.Cell(p.Error))
			continue
		}
		rows := make([]plantext.Row, len(p.Steps))
		for i, s := range p.Steps {
			n, o := p.counts(s)
			rows[i] = plantext.Row{Step: s.Step, New: n, Old: o, Traffic: plantext.TrafficText(s.Traffic, len(p.Routers) > 1),
				Pause: mdPause(s), Analysis: strings.Join(s.Analysis, ", ")}
		}
		plantext.MarkdownTable(w, rows, 0)
		fmt.Fprintln(w)
	}
	for _, g := range r.Groups {
		fmt.Fprintf(w, "> %s\n\n", plantext.Cell(strings.ToUpper(g.text()[:1])+g.text()[1:]))
	}
}

// describe is the Rollout's one-line summary.
func (p rolloutPlan) describe() string {
	size := fmt.Sprintf("%d pods", p.Replicas)
	if p.Unit == "declared" {
		size = "size unknown"
	}
	s := fmt.Sprintf("%s of %s, %s", p.Strategy, p.Workload, size)
	if len(p.Routers) > 0 {
		s += "; routers: " + strings.Join(p.Routers, ", ")
	} else {
		s += "; no trafficRoutings: pods only"
	}
	if len(p.Analysis) > 0 {
		s += "; analysis throughout: " + strings.Join(p.Analysis, ", ")
	}
	switch {
	case p.Group != "" && p.Coordinator == p.Name:
		s += "; lockstep group " + p.Group + ", its coordinator: its gates are the group's"
	case p.Group != "":
		s += "; lockstep group " + p.Group + ": its gates open with " + p.Coordinator + "'s"
	}
	return s
}

// text is the group's summary.
func (g groupPlan) text() string {
	return fmt.Sprintf("lockstep group %s/%s: %s release as one; each step starts for all once all finished the one before; "+
		"the gates are %s's (one approval pull request each); a failure of one rolls back all",
		g.Namespace, g.Name, strings.Join(g.Members, ", "), g.Coordinator)
}

// counts prints the new and old pods of a step; when the size is not
// known, the step's replicas as declared and what stays of the old pods.
func (p rolloutPlan) counts(s stepPlan) (string, string) {
	if p.Unit != "declared" {
		return fmt.Sprint(s.New), fmt.Sprint(s.Old)
	}
	if p.Strategy == "blueGreen" || p.extraWorkload {
		return s.NewDeclared, "all"
	}
	return s.NewDeclared, "the rest"
}

func (c *releaseChange) text() string {
	if len(c.Images) == 0 {
		return c.Reason
	}
	return c.Reason + " (" + strings.Join(c.Images, "; ") + ")"
}

func (c *releaseChange) markdown() string {
	if c == nil {
		return "-"
	}
	if c.Releases {
		return "**" + c.text() + "**"
	}
	return c.text()
}

func pauseText(s stepPlan) string {
	if s.ApprovalBranch != "" {
		return "approval: merge " + s.ApprovalBranch
	}
	return s.Pause
}

// mdPause is pauseText with the branch as code (it holds "<revision>").
func mdPause(s stepPlan) string {
	if s.ApprovalBranch != "" {
		return "approval: merge `" + s.ApprovalBranch + "`"
	}
	return s.Pause
}
