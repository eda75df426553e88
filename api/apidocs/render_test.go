package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollgate/rollgate/test/repo"
)

// TestReferenceIsCurrent fails when docs/api-reference.md no longer matches
// the CRDs (a field, its documentation or a rule changed).
func TestReferenceIsCurrent(t *testing.T) {
	root := repo.Root()
	want, err := RenderDir(filepath.Join(root, "charts", "rollgate", "crds"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "docs", "api-reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatal("docs/api-reference.md is stale: run `make manifests` and commit it")
	}
}

// TestReferenceCoversTheAPI checks that fields, types, constraints and rules
// of the real CRDs reach the page.
func TestReferenceCoversTheAPI(t *testing.T) {
	page, err := RenderDir(filepath.Join(repo.Root(), "charts", "rollgate", "crds"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Rollout", "## AnalysisTemplate", "## Repository",
		"| `spec.workloadRef.kind` | string | **Required.**",
		"| `spec.strategy.canary.steps[].replicas` | int or string |",
		"| `spec.approvals[].step` | integer | **Required.**",
		"| `status.awaitingApproval.branch` | string |",
		"Rules on `spec.metrics[].provider.prometheus.headers[]`, checked at admission:",
		"header name is managed by the HTTP client and cannot be set",
		"_default `30s`._",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the reference lacks %q", want)
		}
	}
	if strings.Contains(page, "status.conditions[].") {
		t.Error("metav1.Condition's own fields must not be listed")
	}
}

func TestRenderDirRefusesAnEmptyFolder(t *testing.T) {
	if _, err := RenderDir(t.TempDir()); err == nil {
		t.Fatal("an empty folder must be an error")
	}
}
