package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestConvertThenPlan converts every Kruise manifest of the corpus
// (api/kruise/testdata) with the command and plans the output with
// `rollgate plan`: every converted Rollout passes. A manifest naming a
// CloneSet exits 7 and says why; the rest of the file is still printed.
func TestConvertThenPlan(t *testing.T) {
	inputs, err := filepath.Glob("../../api/kruise/testdata/*/kruise.yaml")
	if err != nil || len(inputs) < 8 {
		t.Fatalf("the corpus is missing: %v %v", inputs, err)
	}
	for _, in := range inputs {
		name := filepath.Base(filepath.Dir(in))
		cmd := exec.Command(os.Args[0], "convert", in)
		cmd.Env = append(os.Environ(), "ROLLGATE_TEST_RUN_MAIN=1")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, _ := cmd.Output()
		code := cmd.ProcessState.ExitCode()
		if name == "not-convertible" {
			if code != exitNotConverted || !strings.Contains(stderr.String(), "CloneSet is not released by rollgate") || !strings.Contains(string(out), "name: unrelated") {
				t.Errorf("%s: exit %d, want %d naming the CloneSet:\n%s\n%s", name, code, exitNotConverted, stderr.String(), out)
			}
			continue
		}
		if code != exitOK || !strings.Contains(stderr.String(), ": converted") {
			t.Fatalf("%s: convert exit %d:\n%s", name, code, stderr.String())
		}
		converted := filepath.Join(t.TempDir(), "rollout.yaml")
		if err := os.WriteFile(converted, out, 0o644); err != nil {
			t.Fatal(err)
		}
		plan, code := runMain(t, "plan", converted)
		if code != exitOK || !strings.Contains(plan, "STEP") {
			t.Errorf("%s: rollgate plan of the converted file: exit %d:\n%s\n%s", name, code, plan, out)
		}
	}
}

// TestConvertRefusesWhatItCannotConvert: a file holding a single Kruise
// Rollout of a CloneSet, an empty file and an Argo Rollout each exit 7
// with the reason, never a YAML error or an unchanged file with exit 0.
func TestConvertRefusesWhatItCannotConvert(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct{ file, want string }{
		"CloneSet alone": {"apiVersion: rollouts.kruise.io/v1beta1\nkind: Rollout\nmetadata: {name: web, namespace: demo}\n" +
			"spec:\n  workloadRef: {apiVersion: apps.kruise.io/v1alpha1, kind: CloneSet, name: web}\n  strategy: {canary: {steps: [{replicas: 1}]}}\n",
			"CloneSet is not released by rollgate"},
		"empty":          {"", "the input holds no object"},
		"Argo Rollout":   {"apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata: {name: a}\nspec: {}\n", "an Argo Rollout is not converted"},
		"no Kruise kind": {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n", "holds no object of rollouts.kruise.io"},
	} {
		in := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
		if err := os.WriteFile(in, []byte(c.file), 0o644); err != nil {
			t.Fatal(err)
		}
		out, code := runMain(t, "convert", in)
		if code != exitNotConverted || !strings.Contains(out, c.want) || strings.Contains(out, "STREAM-START") {
			t.Errorf("%s: exit %d, want %d saying %q:\n%s", name, code, exitNotConverted, c.want, out)
		}
	}
}
