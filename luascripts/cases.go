package luascripts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// A test directory, as run by RunCases (and `rollgate lua test <dir>`):
//
//	<dir>/VirtualService.networking.istio.io.lua   optional: overrides a script,
//	<dir>/ingress.nginx.lua                        named as its ConfigMap key
//	                                               without "lua.traffic.routing."
//	<dir>/**/<case>.yaml                           test cases, any depth
//
// A case file holds:
//
//	rollout:        a rollgate.dev/v1alpha1 Rollout; its steps and its one
//	                trafficRoutings entry drive the case
//	canaryService:  optional; the canary Service (default "<service>-canary";
//	                set it to the service to test subset routing)
//	original:       the object before the release: for customNetworkRefs a
//	                whole object (apiVersion and kind pick the script), for
//	                an ingress either an Ingress or a map of annotations
//	expected:       one entry per step: the object (or annotations) after
//	                that step, or {luaError: "<text>"} when the step must
//	                fail with an error containing the text
//
// Revisions come from rollout.status (stableRevision, canaryRevision),
// defaulting to "stable" and "canary"; the revision label key is
// pod-template-hash for a Deployment, controller-revision-hash otherwise.

// testCase is one decoded case file.
type testCase struct {
	Rollout       v1alpha1.Rollout `json:"rollout"`
	CanaryService string           `json:"canaryService,omitempty"`
	Original      map[string]any   `json:"original"`
	Expected      []map[string]any `json:"expected"`
}

// caseRun is what every step of one case shares.
type caseRun struct {
	script  Script
	ingress bool
	steps   []v1alpha1.CanaryStep
	target  Target
	sticky  string
}

// RunCases runs every case file under dir against the scripts of lib (a
// new Library when nil), with the scripts in dir overriding lib's as a
// ConfigMap would. It prints one line per passing case and a unified diff
// (YAML, expected against got) per failing step to out, then a summary. It
// returns the number of failed steps (a case that cannot run counts as
// one); err is only for a directory that cannot be read or holds no case
// file (a mistyped path must not pass as "0 failed").
func RunCases(dir string, lib *Library, out io.Writer) (failed int, err error) {
	if lib == nil {
		lib = NewLibrary()
	}
	overrides, files, err := scanCaseDir(dir)
	if err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("no test cases in %s: case files are *.yaml or *.yml files in it or below it", dir)
	}
	runner := Runner{Print: out}
	steps := 0
	for _, file := range files {
		rel, _ := filepath.Rel(dir, file)
		n, f := runCaseFile(file, rel, lib, overrides, runner, out)
		steps += n
		failed += f
	}
	fmt.Fprintf(out, "%d cases, %d steps, %d failed\n", len(files), steps, failed)
	return failed, nil
}

// scanCaseDir reads the script overrides at the top of dir and lists the
// case files below it.
func scanCaseDir(dir string) (map[string]string, []string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	overrides := map[string]string{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".lua") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, nil, err
		}
		overrides[KeyPrefix+strings.TrimSuffix(e.Name(), ".lua")] = string(src)
	}
	var files []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	return overrides, files, err
}

// runCaseFile runs one case and returns its number of steps and of
// failures.
func runCaseFile(file, name string, lib *Library, overrides map[string]string, runner Runner, out io.Writer) (int, int) {
	tc, run, err := loadCase(file, lib, overrides)
	if err != nil {
		fmt.Fprintf(out, "--- FAIL: %s: %v\n", name, err)
		return 0, 1
	}
	failed := 0
	for i, step := range run.steps {
		label := fmt.Sprintf("%s step %d (%s)", name, i+1, run.script.Name)
		got, runErr := run.step(runner, tc, step)
		msg := checkStep(tc.Expected[i], got, runErr)
		if msg == "" && run.script.native != nil {
			// The built-in's Go implementation ran; its Lua script must
			// give exactly the same.
			lua := run
			lua.script = run.script.luaOnly()
			luaGot, luaErr := lua.step(runner, tc, step)
			msg = sameOutcome(got, runErr, luaGot, luaErr)
		}
		if msg != "" {
			fmt.Fprintf(out, "--- FAIL: %s\n%s", label, msg)
			failed++
		}
	}
	if failed == 0 {
		fmt.Fprintf(out, "ok   %s (%d steps, %s)\n", name, len(run.steps), describeNative(run.script))
	}
	return len(run.steps), failed
}

func loadCase(file string, lib *Library, overrides map[string]string) (testCase, caseRun, error) {
	var tc testCase
	data, err := os.ReadFile(file)
	if err != nil {
		return tc, caseRun{}, err
	}
	if err := yaml.UnmarshalStrict(data, &tc); err != nil {
		return tc, caseRun{}, fmt.Errorf("decode: %w", err)
	}
	run, err := tc.prepare(lib, overrides)
	return tc, run, err
}

func (tc testCase) prepare(lib *Library, overrides map[string]string) (caseRun, error) {
	var run caseRun
	var routings []v1alpha1.TrafficRoutingRef
	s := tc.Rollout.Spec.Strategy
	switch {
	case s.Canary != nil:
		run.steps, routings = s.Canary.Steps, s.Canary.TrafficRoutings
		run.target.PatchPodMetadata = s.Canary.PatchPodTemplateMetadata
	case s.BlueGreen != nil:
		run.steps, routings = s.BlueGreen.Steps, s.BlueGreen.TrafficRoutings
	}
	if len(routings) != 1 {
		return run, errors.New("rollout: strategy needs exactly one trafficRoutings entry")
	}
	if len(tc.Expected) != len(run.steps) {
		return run, fmt.Errorf("expected has %d entries for %d steps", len(tc.Expected), len(run.steps))
	}
	tr := routings[0]
	run.sticky = tr.StickyCookie()
	run.target.StableService, run.target.CanaryService = tr.Service, tr.Service+"-canary"
	if tc.CanaryService != "" {
		run.target.CanaryService = tc.CanaryService
	}
	st := tc.Rollout.Status
	run.target.StableRevision, run.target.CanaryRevision = orDefault(st.StableRevision, "stable"), orDefault(st.CanaryRevision, "canary")
	run.target.RevisionLabelKey = "controller-revision-hash"
	if tc.Rollout.Spec.WorkloadRef.Kind == "Deployment" {
		run.target.RevisionLabelKey = "pod-template-hash"
	}
	var err error
	if tr.Ingress != nil {
		run.ingress = true
		run.script, err = lib.ResolveIngress(tr.Ingress.ClassType, overrides)
		return run, err
	}
	apiVersion, _ := tc.Original["apiVersion"].(string)
	kind, _ := tc.Original["kind"].(string)
	group := ""
	if i := strings.LastIndex(apiVersion, "/"); i >= 0 {
		group = apiVersion[:i]
	}
	run.script, err = lib.Resolve(kind, group, overrides)
	return run, err
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// step runs one step and returns the object (or annotations) it produces.
func (run caseRun) step(runner Runner, tc testCase, step v1alpha1.CanaryStep) (map[string]any, error) {
	got, err := deepCopyJSON(tc.Original)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	if !run.ingress {
		data, err := ObjectDataFrom(got)
		if err != nil {
			return nil, err
		}
		in, err := NewCustomInput(data, step.TrafficRoutingStrategy, run.target)
		if err != nil {
			return nil, err
		}
		in.StickyCookie = run.sticky
		res, err := runner.RunCustom(ctx, run.script, in)
		if err != nil {
			return nil, err
		}
		res.ApplyTo(got)
		return got, nil
	}
	isIngress := got["kind"] == "Ingress"
	annotations := got
	if isIngress {
		meta, _ := got["metadata"].(map[string]any)
		annotations, _ = meta["annotations"].(map[string]any)
	}
	ann, err := stringMap(annotations, "annotations")
	if err != nil {
		return nil, err
	}
	in, err := NewIngressInput(ann, step.TrafficRoutingStrategy, run.target)
	if err != nil {
		return nil, err
	}
	res, err := runner.RunIngress(ctx, run.script, in)
	if err != nil {
		return nil, err
	}
	if !isIngress {
		return toAnyMap(res), nil
	}
	ObjectData{Spec: asMap(got["spec"]), Annotations: res, Labels: labelsOf(got)}.ApplyTo(got)
	return got, nil
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func labelsOf(obj map[string]any) map[string]string {
	d, _ := ObjectDataFrom(obj)
	return d.Labels
}

func toAnyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// checkStep compares one step's outcome with its expectation and returns
// a readable report, or "" when they agree.
func checkStep(expected, got map[string]any, runErr error) string {
	if want, ok := expected["luaError"].(string); ok && len(expected) == 1 {
		switch {
		case runErr == nil:
			return fmt.Sprintf("    expected an error containing %q, got none\n", want)
		case !strings.Contains(runErr.Error(), want):
			return fmt.Sprintf("    expected an error containing %q, got: %v\n", want, runErr)
		}
		return ""
	}
	if runErr != nil {
		return fmt.Sprintf("    %v\n", runErr)
	}
	return yamlDiff(expected, got, "expected", "got")
}

// yamlDiff is the unified diff of a and b as YAML, or "" when they are
// equal.
func yamlDiff(a, b map[string]any, nameA, nameB string) string {
	want, err1 := toYAML(a)
	have, err2 := toYAML(b)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Sprintf("    %v\n", err)
	}
	if want == have {
		return ""
	}
	return unifiedDiff(strings.Split(want, "\n"), strings.Split(have, "\n"), nameA, nameB)
}

// sameOutcome compares the outcome of a built-in's Go implementation with
// that of its Lua script: the same object, or the same error.
func sameOutcome(goGot map[string]any, goErr error, luaGot map[string]any, luaErr error) string {
	if goErr != nil || luaErr != nil {
		if goErr != nil && luaErr != nil && goErr.Error() == luaErr.Error() {
			return ""
		}
		return fmt.Sprintf("    the Go implementation and the Lua script differ:\n    Go:  %v\n    Lua: %v\n", goErr, luaErr)
	}
	if diff := yamlDiff(luaGot, goGot, "Lua", "Go"); diff != "" {
		return "    the Go implementation and the Lua script differ:\n" + diff
	}
	return ""
}

// toYAML renders v as YAML with sorted keys, after a JSON round trip so
// that int64 and float64 of the same value compare equal.
func toYAML(v any) (string, error) {
	norm, err := deepCopyJSON(v)
	if err != nil {
		return "", err
	}
	b, err := yaml.Marshal(norm)
	return string(b), err
}

func deepCopyJSON[T any](v T) (T, error) {
	var out T
	b, err := json.Marshal(v)
	if err != nil {
		return out, err
	}
	err = json.Unmarshal(b, &out)
	return out, err
}
