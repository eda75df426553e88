package main

import (
	"fmt"
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

// TestConvertRefusesWhatItCannotConvert runs every case of
// testdata/convert/<case>/input.yaml (a single Kruise Rollout of a CloneSet,
// an empty file, an Argo Rollout, a rolling style Kruise refuses, no Kruise
// object): each exits 7 and says why (want.txt), never a YAML error or an
// unchanged file with exit 0.
func TestConvertRefusesWhatItCannotConvert(t *testing.T) {
	inputs, err := filepath.Glob("testdata/convert/*/input.yaml")
	if err != nil || len(inputs) < 5 {
		t.Fatalf("the refusal corpus is missing: %v %v", inputs, err)
	}
	for _, in := range inputs {
		name := filepath.Base(filepath.Dir(in))
		want, err := os.ReadFile(filepath.Join(filepath.Dir(in), "want.txt"))
		if err != nil {
			t.Fatal(err)
		}
		out, code := runMain(t, "convert", in)
		if code != exitNotConverted || !strings.Contains(out, strings.TrimSpace(string(want))) || strings.Contains(out, "STREAM-START") {
			t.Errorf("%s: exit %d, want %d saying %q:\n%s", name, code, exitNotConverted, strings.TrimSpace(string(want)), out)
		}
	}
}

// TestConvertKeepsKruiseGates converts the shape of Kruise's recommended
// Istio configuration (v1alpha1, canary style, no step says pause, the last
// at 90%) and plans the output: Kruise waits for a human after each of the
// three steps, so the plan has three gates, the report says so for each,
// and the release uses a separate canary Deployment, as Kruise's default
// v1alpha1 style does.
func TestConvertKeepsKruiseGates(t *testing.T) {
	cmd := exec.Command(os.Args[0], "convert", "../../api/kruise/testdata/v1alpha1-istio-no-pause/kruise.yaml")
	cmd.Env = append(os.Environ(), "ROLLGATE_TEST_RUN_MAIN=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("convert: %v\n%s", err, stderr.String())
	}
	for i := 0; i < 3; i++ {
		if want := fmt.Sprintf("steps[%d].pause added: step %d has no pause: Kruise waits there for a human", i, i+1); !strings.Contains(stderr.String(), want) {
			t.Errorf("the report does not say %q:\n%s", want, stderr.String())
		}
	}
	if !strings.Contains(string(out), "enableExtraWorkloadForCanary: true") || !strings.Contains(stderr.String(), "enableExtraWorkloadForCanary added") {
		t.Errorf("the canary style (a separate canary Deployment) was not kept:\n%s\n%s", out, stderr.String())
	}
	converted := filepath.Join(t.TempDir(), "rollout.yaml")
	if err := os.WriteFile(converted, out, 0o644); err != nil {
		t.Fatal(err)
	}
	plan, code := runMain(t, "plan", converted)
	if n := strings.Count(plan, "approval: merge"); code != exitOK || n != 3 {
		t.Errorf("the plan of the converted Rollout has %d gates (exit %d), want 3 (one per Kruise step):\n%s", n, code, plan)
	}
}
