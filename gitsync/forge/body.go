package forge

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Fact keys that ApprovalBody and RevertBody show first, in this order.
// Other keys follow in lexical order, so analysis results named
// "Analysis: <metric>" stay together.
const (
	// FactImage is the canary image (approvals) or a stable image to
	// restore (reverts).
	FactImage = "Image"
	// FactReplicas is the replica change of the step, such as "4 → 3".
	FactReplicas = "Replicas"
	// FactStableReplicas is the stable workload's replicas, old → new.
	FactStableReplicas = "Stable replicas"
	// FactCanaryReplicas is the canary workload's replicas, old → new.
	FactCanaryReplicas = "Canary replicas"
	// FactTraffic is the canary's traffic weight, old → new.
	FactTraffic = "Traffic"
	// FactAnalysis is the overall analysis verdict.
	FactAnalysis = "Analysis"
)

// Change formats a value that a step changes as "from → to", or just to
// when it does not change.
func Change(from, to string) string {
	if from == to {
		return to
	}
	return from + " → " + to
}

// ApprovalTitle is the title of the pull request approving step of
// revision, in the words of the approval commit's subject. attempt is the
// release attempt (status.attempt); it is named from attempt 2 on.
func ApprovalTitle(ns, name, revision string, attempt, step, totalSteps int) string {
	return fmt.Sprintf("rollgate: approve %s/%s revision %s%s step %s", ns, name, revision, attemptOf(attempt), stepOf(step, totalSteps))
}

// ApprovalBody is the Markdown description of the pull request approving
// step (of totalSteps; 0 when unknown) of revision for Rollout ns/name, in
// the given release attempt (named from attempt 2 on, after a retry).
// facts are extra key/value rows for the table, such as replicas and
// traffic before and after the step (see Change) and analysis results;
// they are ordered as the Fact constants say. The output depends only on
// the arguments.
func ApprovalBody(ns, name, revision string, attempt, step, totalSteps int, facts map[string]string) string {
	var b strings.Builder
	b.WriteString("## rollgate: approval needed\n\n")
	rows := [][2]string{{"Rollout", code(ns + "/" + name)}, {"Revision", code(revision)}}
	release, approves, scope := "", fmt.Sprintf("step %d of revision %s", step, text(revision)), "revision and step"
	entry := fmt.Sprintf("{revision: %s, step: %d}", strings.ReplaceAll(revision, "`", "'"), step)
	if attempt > 1 {
		rows = append(rows, [2]string{"Attempt", strconv.Itoa(attempt)})
		release = fmt.Sprintf(" (attempt %d, after a retry)", attempt)
		approves += fmt.Sprintf(", attempt %d", attempt)
		scope = "revision, attempt and step"
		entry = strings.TrimSuffix(entry, "}") + fmt.Sprintf(", attempt: %d}", attempt)
	}
	fmt.Fprintf(&b, "The rollout of %s to revision %s%s is waiting for approval of step %s.\n\n",
		code(ns+"/"+name), code(revision), release, stepOf(step, totalSteps))
	table(&b, append(rows, [2]string{"Step", stepOf(step, totalSteps)}), facts)
	fmt.Fprintf(&b, "\n**Merging this pull request approves %s.** "+
		"rollgate then continues the rollout. The approval counts for this %s only; "+
		"when a newer revision, attempt or step supersedes it, rollgate closes this pull request.\n\n",
		approves, scope)
	fmt.Fprintf(&b, "<sub>Opened by rollgate. The branch adds `%s` to `spec.approvals` "+
		"of the Rollout manifest and changes nothing else.</sub>\n", entry)
	return b.String()
}

// attemptOf formats " attempt 2" from attempt 2 on, else "".
func attemptOf(attempt int) string {
	if attempt > 1 {
		return " attempt " + strconv.Itoa(attempt)
	}
	return ""
}

// RevertTitle is the title of the pull request reverting the failed
// revision of Rollout ns/name, in the words of the revert commit's subject.
func RevertTitle(ns, name, revision string) string {
	return fmt.Sprintf("rollgate: revert %s/%s to stable (revision %s failed)", ns, name, revision)
}

// RevertBody is the Markdown description of the pull request reverting
// Rollout ns/name to its stable images after revision failed for reason
// ("" when unknown). facts are extra key/value rows, such as
// "Image app" → the stable image and analysis results, ordered as for
// ApprovalBody. The output depends only on the arguments.
func RevertBody(ns, name, revision, reason string, facts map[string]string) string {
	var b strings.Builder
	b.WriteString("## rollgate: revert to stable\n\n")
	fmt.Fprintf(&b, "Revision %s of %s failed", code(revision), code(ns+"/"+name))
	if reason = strings.Join(strings.Fields(reason), " "); reason != "" {
		b.WriteString(": " + text(strings.TrimSuffix(reason, ".")))
	}
	b.WriteString(". Git still declares that revision.\n\n")
	table(&b, [][2]string{
		{"Rollout", code(ns + "/" + name)},
		{"Failed revision", code(revision)},
	}, facts)
	fmt.Fprintf(&b, "\n**Merging this pull request reverts %s to its stable images**, "+
		"so Git no longer declares the failed revision %s and the GitOps tool does not roll it out again.\n\n",
		text(ns+"/"+name), text(revision))
	b.WriteString("<sub>Opened by rollgate. The branch sets container images back to the stable version " +
		"in the manifests, kustomizations and marked Helm values that declare them.</sub>\n")
	return b.String()
}

// stepOf formats "2 of 4", or "2" when the total is unknown.
func stepOf(step, total int) string {
	if total > 0 {
		return strconv.Itoa(step) + " of " + strconv.Itoa(total)
	}
	return strconv.Itoa(step)
}

// table writes a two-column Markdown table: the fixed rows (values already
// formatted), then facts in display order (see factKeys). Empty keys are
// skipped and empty values shown as "—".
func table(b *strings.Builder, fixed [][2]string, facts map[string]string) {
	b.WriteString("| Field | Value |\n| --- | --- |\n")
	for _, r := range fixed {
		fmt.Fprintf(b, "| %s | %s |\n", r[0], r[1])
	}
	for _, k := range factKeys(facts) {
		v := facts[k]
		if strings.TrimSpace(v) == "" {
			v = "—"
		}
		fmt.Fprintf(b, "| %s | %s |\n", text(k), text(v))
	}
}

// factKeys returns the non-empty keys of facts in display order: the Fact
// constants first, in their declared order, then the rest lexically.
func factKeys(facts map[string]string) []string {
	order := [...]string{FactImage, FactReplicas, FactStableReplicas, FactCanaryReplicas, FactTraffic, FactAnalysis}
	rank := func(k string) int {
		for i, f := range order {
			if k == f {
				return i
			}
		}
		return len(order)
	}
	keys := make([]string, 0, len(facts))
	for k := range facts {
		if strings.TrimSpace(k) != "" {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if ri, rj := rank(keys[i]), rank(keys[j]); ri != rj {
			return ri < rj
		}
		return keys[i] < keys[j]
	})
	return keys
}

// markdownEscaper escapes the characters that would turn plain text into
// Markdown or HTML.
var markdownEscaper = strings.NewReplacer(
	`\`, `\\`, "`", "\\`", "*", `\*`, "_", `\_`, "[", `\[`, "]", `\]`,
	"<", "&lt;", ">", "&gt;", "|", `\|`, "#", `\#`, "~", `\~`,
)

// text returns s as literal Markdown text on one line (also safe in a
// table cell).
func text(s string) string {
	return markdownEscaper.Replace(strings.Join(strings.Fields(s), " "))
}

// code returns s as inline code; backticks become quotes and pipes are
// escaped, which GitHub, GitLab and Gitea honour inside table cells.
func code(s string) string {
	s = strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "`", "'")
	return "`" + strings.ReplaceAll(s, "|", `\|`) + "`"
}
