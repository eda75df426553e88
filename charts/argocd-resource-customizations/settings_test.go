package argocd

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// docsPath is the page that carries the argocd-cm settings.
var docsPath = filepath.Join("..", "..", "docs", "argocd.md")

const (
	docsBegin = "<!-- argocd-cm: generated from charts/argocd-resource-customizations by `go test ./charts/argocd-resource-customizations -run TestDocsCarryTheScripts -update`; edit the .lua files, not this block -->"
	docsEnd   = "<!-- end argocd-cm -->"
)

// TestActionFilesMatchActions: every action folder is listed by Actions,
// and every listed action has a script.
func TestActionFilesMatchActions(t *testing.T) {
	entries, err := fs.ReadDir(scripts, dir+"/actions")
	if err != nil {
		t.Fatal(err)
	}
	var folders []string
	for _, e := range entries {
		if e.IsDir() {
			folders = append(folders, e.Name())
		}
	}
	listed := append([]string(nil), Actions()...)
	sort.Strings(folders)
	sort.Strings(listed)
	if !reflect.DeepEqual(folders, listed) {
		t.Errorf("action folders %v, Actions() %v: keep them the same", folders, listed)
	}
	if _, err := Action("no-such-action"); err == nil {
		t.Error("Action of an unknown name did not fail")
	}
}

// TestScriptsUseOnlyBaseAndTable: argocd-cm scripts get no string, math,
// io or debug library and no require of them (Argo CD's os is restricted).
// The runner would fail a call on the paths the fixtures reach; this
// catches the others.
func TestScriptsUseOnlyBaseAndTable(t *testing.T) {
	forbidden := regexp.MustCompile(`\b(string|math|io|os|debug|coroutine)\s*\.|\brequire\b|\bload(string|file)?\s*\(|\bdofile\b|:\s*(format|sub|find|match|gmatch|gsub|len|lower|upper|rep|byte|reverse)\s*\(`)
	err := fs.WalkDir(scripts, dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(scripts, path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if c := strings.Index(line, "--"); c >= 0 {
				line = line[:c]
			}
			if m := forbidden.FindString(line); m != "" {
				t.Errorf("%s:%d uses %q, which argocd-cm scripts do not have", path, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSettingsRoundTrip reads ConfigMapData as Argo CD reads argocd-cm:
// the health value is health.lua, and the actions value parses into
// discovery.lua and one definition per action, each exactly its file.
func TestSettingsRoundTrip(t *testing.T) {
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.UnmarshalStrict([]byte(ConfigMapData()), &cm); err != nil {
		t.Fatalf("ConfigMapData is not valid YAML: %v", err)
	}
	if len(cm.Data) != 2 {
		t.Errorf("data has %d keys, want %s and %s", len(cm.Data), HealthKey, ActionsKey)
	}
	if cm.Data[HealthKey] != Health() {
		t.Errorf("%s differs from health.lua:\n%s", HealthKey, cm.Data[HealthKey])
	}
	var actions struct {
		Discovery   string `json:"discovery.lua"`
		Definitions []struct {
			Name   string `json:"name"`
			Action string `json:"action.lua"`
		} `json:"definitions"`
	}
	if err := yaml.UnmarshalStrict([]byte(cm.Data[ActionsKey]), &actions); err != nil {
		t.Fatalf("%s is not what Argo CD reads: %v", ActionsKey, err)
	}
	if actions.Discovery != Discovery() {
		t.Errorf("discovery.lua differs:\n%s", actions.Discovery)
	}
	var names []string
	for _, d := range actions.Definitions {
		names = append(names, d.Name)
		want, err := Action(d.Name)
		if err != nil {
			t.Error(err)
			continue
		}
		if d.Action != want {
			t.Errorf("action %s differs from its action.lua:\n%s", d.Name, d.Action)
		}
	}
	if !reflect.DeepEqual(names, Actions()) {
		t.Errorf("definitions %v, want %v", names, Actions())
	}
}

// TestDocsCarryTheScripts: docs/argocd.md shows ConfigMapData exactly, so
// the page never drifts from the files. -update rewrites the block.
func TestDocsCarryTheScripts(t *testing.T) {
	raw, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	begin := strings.Index(doc, docsBegin)
	end := strings.Index(doc, docsEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s has no block between %q and %q", docsPath, docsBegin, docsEnd)
	}
	begin += len(docsBegin) + 1
	want := "```yaml\n" + ConfigMapData() + "```\n"
	if doc[begin:end] == want {
		return
	}
	if *update {
		if err := os.WriteFile(docsPath, []byte(doc[:begin]+want+doc[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the argocd-cm block of %s differs from the scripts: run go test ./charts/argocd-resource-customizations -run TestDocsCarryTheScripts -update", docsPath)
}
