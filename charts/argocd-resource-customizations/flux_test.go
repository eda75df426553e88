package argocd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	"sigs.k8s.io/yaml"
)

// The Flux side of the GitOps integration has no script of its own: Flux
// reads a Rollout's kstatus conditions, or the CEL health check expressions
// docs/flux.md recommends. These tests read both against the fixtures the
// Argo CD scripts are tested with, so that the page says what Flux does.

// kstatus results.
const (
	inProgress = "InProgress"
	failed     = "Failed"
	current    = "Current"
)

// TestFluxKstatus follows kstatus's generic rules for custom resources, the
// ones Flux's healthChecks apply to a Rollout, over every fixture.
func TestFluxKstatus(t *testing.T) {
	want := map[string]string{
		"no-status":               current, // nothing observed yet: kstatus cannot tell
		"generation-not-observed": inProgress,
		// A release under way (no Ready, Reconciling=False): the apply is
		// done, so Flux's waits end; kubectl wait on Ready still waits.
		"progressing":                    current,
		"awaiting-approval":              current,
		"awaiting-approval-step2":        current,
		"awaiting-approval-inconclusive": current,
		"awaiting-approval-retry":        current,
		"timed-pause":                    current,
		"paused":                         current,
		"failed-analysis":                failed,
		"aborted":                        inProgress, // still rolling back
		"stalled-invalid-spec":           failed,
		"completed":                      current,
		"disabled":                       current,
	}
	for _, fixture := range fixtures {
		if got := kstatusGeneric(loadFixture(t, fixture)); got != want[fixture] {
			t.Errorf("%s: kstatus %s, want %s", fixture, got, want[fixture])
		}
	}
}

// TestFluxHealthCheckExprs evaluates the healthCheckExprs of docs/flux.md
// as kustomize-controller does. They hold a Kustomization until a release
// is over: a release under way (moving, pausing, at a gate) is InProgress,
// a failed one Failed, a released one Current.
func TestFluxHealthCheckExprs(t *testing.T) {
	exprs := docsHealthCheckExprs(t)
	want := map[string]string{
		"no-status":                      "error", // no status yet: Flux polls again
		"generation-not-observed":        inProgress,
		"progressing":                    inProgress,
		"awaiting-approval":              inProgress,
		"awaiting-approval-step2":        inProgress,
		"awaiting-approval-inconclusive": inProgress,
		"awaiting-approval-retry":        inProgress,
		"timed-pause":                    inProgress,
		"paused":                         inProgress,
		"failed-analysis":                failed,
		"aborted":                        failed, // failed, rolling back
		"stalled-invalid-spec":           failed,
		"completed":                      current,
		"disabled":                       current,
	}
	for _, fixture := range fixtures {
		got, err := exprs.evaluate(loadFixture(t, fixture))
		if err != nil {
			got = "error"
		}
		if got != want[fixture] {
			t.Errorf("%s: %s (%v), want %s", fixture, got, err, want[fixture])
		}
	}
}

// kstatusGeneric is kstatus's reading of a custom resource without
// resource-specific rules.
func kstatusGeneric(obj map[string]any) string {
	st, _ := obj["status"].(map[string]any)
	if observed, ok := st["observedGeneration"]; ok && observed != obj["metadata"].(map[string]any)["generation"] {
		return inProgress
	}
	conds, _ := st["conditions"].([]any)
	for _, c := range conds {
		c := c.(map[string]any)
		switch {
		case c["type"] == "Reconciling" && c["status"] == "True":
			return inProgress
		case c["type"] == "Stalled" && c["status"] == "True":
			return failed
		}
	}
	return current
}

// healthExprs are compiled health check expressions of one kind.
type healthExprs struct {
	inProgress, failed, current cel.Program
}

// evaluate follows kustomize-controller's order: the generation check,
// then inProgress, failed and current; no match is InProgress.
func (h healthExprs) evaluate(obj map[string]any) (string, error) {
	st, _ := obj["status"].(map[string]any)
	if observed, ok := st["observedGeneration"]; ok {
		if gen, ok := obj["metadata"].(map[string]any)["generation"]; ok && gen != observed {
			return inProgress, nil
		}
	}
	for _, e := range []struct {
		prog   cel.Program
		status string
	}{{h.inProgress, inProgress}, {h.failed, failed}, {h.current, current}} {
		if e.prog == nil {
			continue
		}
		v, _, err := e.prog.ContextEval(context.Background(), obj)
		if err != nil {
			return "", err
		}
		b, ok := v.(types.Bool)
		if !ok {
			return "", fmt.Errorf("expression returned %v, not a bool", v)
		}
		if b {
			return e.status, nil
		}
	}
	return inProgress, nil
}

// docsHealthCheckExprs finds the Rollout's healthCheckExprs in the YAML of
// docs/flux.md and compiles them in Flux's CEL environment.
func docsHealthCheckExprs(t *testing.T) healthExprs {
	t.Helper()
	var found []map[string]any
	for _, doc := range docsYAML(t, filepath.Join("..", "..", "docs", "flux.md")) {
		spec, _ := doc["spec"].(map[string]any)
		list, _ := spec["healthCheckExprs"].([]any)
		for _, e := range list {
			e := e.(map[string]any)
			if strings.HasPrefix(fmt.Sprint(e["apiVersion"]), Group+"/") && e["kind"] == Kind {
				found = append(found, e)
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("docs/flux.md has %d healthCheckExprs entries for %s/%s, want 1", len(found), Group, Kind)
	}
	env, err := cel.NewEnv(
		cel.HomogeneousAggregateLiterals(),
		cel.EagerlyValidateDeclarations(true),
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Strings(),
		ext.Sets(),
		ext.Encoders(),
	)
	if err != nil {
		t.Fatal(err)
	}
	compile := func(field string) cel.Program {
		src, _ := found[0][field].(string)
		if src == "" {
			return nil
		}
		ast, iss := env.Parse(src)
		if iss != nil && iss.Err() != nil {
			t.Fatalf("%s: %v", field, iss.Err())
		}
		prog, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize))
		if err != nil {
			t.Fatalf("%s: %v", field, err)
		}
		return prog
	}
	h := healthExprs{inProgress: compile("inProgress"), failed: compile("failed"), current: compile("current")}
	if h.current == nil {
		t.Fatal("healthCheckExprs without current: Flux refuses it")
	}
	return h
}

// docsYAML parses every yaml code block of a Markdown page, each document
// of a multi-document block separately; a block that is not valid YAML
// fails the test.
func docsYAML(t *testing.T, path string) []map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []map[string]any
	blocks := strings.Split(string(raw), "```yaml\n")
	for i, b := range blocks[1:] {
		end := strings.Index(b, "```")
		if end < 0 {
			t.Fatalf("%s: yaml block %d is not closed", path, i+1)
		}
		for _, d := range bytes.Split([]byte(b[:end]), []byte("\n---\n")) {
			var doc map[string]any
			if err := yaml.Unmarshal(d, &doc); err != nil {
				t.Errorf("%s: yaml block %d: %v", path, i+1, err)
				continue
			}
			if doc != nil {
				docs = append(docs, doc)
			}
		}
	}
	return docs
}

// TestDocsYAML: every yaml block of the integration pages parses.
func TestDocsYAML(t *testing.T) {
	for _, page := range []string{"argocd.md", "flux.md"} {
		if docs := docsYAML(t, filepath.Join("..", "..", "docs", page)); len(docs) == 0 {
			t.Errorf("%s: no yaml blocks found", page)
		}
	}
}
