package chart

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollgate/rollgate/test/repo"
)

// TestValuesTableIsCurrent checks docs/helm-values.md against the table
// generated from the "# --" comments of values.yaml. Run with
// UPDATE_GOLDEN=1 to regenerate it.
func TestValuesTableIsCurrent(t *testing.T) {
	values, err := os.ReadFile(filepath.Join(chartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got := valuesTable(values)
	path := filepath.Join(repo.Root(), "docs", "helm-values.md")
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil || string(want) != got {
		t.Fatalf("docs/helm-values.md is not generated from values.yaml (run UPDATE_GOLDEN=1 go test ./test/chart/): %v\n%s", err, diffLines(string(want), got))
	}
}

// valuesTable renders a Markdown table of every value documented with a
// "# --" comment: its dotted key, its default and its description.
func valuesTable(values []byte) string {
	var b strings.Builder
	b.WriteString("# Helm values\n\nGenerated from `charts/rollgate/values.yaml` by `UPDATE_GOLDEN=1 go test ./test/chart/`; do not edit.\n\n")
	b.WriteString("| key | default | description |\n|---|---|---|\n")
	var path []string
	var indents []int
	var doc []string
	sc := bufio.NewScanner(bytes.NewReader(values))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		indent := len(line) - len(strings.TrimLeft(line, " "))
		switch {
		case strings.HasPrefix(trimmed, "# --"):
			doc = []string{strings.TrimSpace(strings.TrimPrefix(trimmed, "# --"))}
			continue
		case strings.HasPrefix(trimmed, "#") && doc != nil:
			doc = append(doc, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
			continue
		case trimmed == "" || strings.HasPrefix(trimmed, "- ") || !strings.Contains(trimmed, ":"):
			continue
		}
		for len(indents) > 0 && indents[len(indents)-1] >= indent {
			indents, path = indents[:len(indents)-1], path[:len(path)-1]
		}
		key, val, _ := strings.Cut(trimmed, ":")
		indents, path = append(indents, indent), append(path, key)
		if doc != nil {
			def := strings.TrimSpace(val)
			if def == "" {
				def = "(see values.yaml)"
			}
			fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", strings.Join(path, "."), strings.ReplaceAll(def, "|", "\\|"), strings.Join(doc, " "))
			doc = nil
		}
	}
	return b.String()
}
