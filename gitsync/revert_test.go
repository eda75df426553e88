package gitsync_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rollgate/rollgate/gitsync"
)

// revertCase is the request.json of a revert-* golden case.
type revertCase struct {
	Path     string
	Workload gitsync.WorkloadRef
	Images   map[string]string
	Missing  []string
}

func TestRevertImagesGolden(t *testing.T) {
	dirs, err := filepath.Glob("testdata/revert-*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var tc revertCase
			data, err := os.ReadFile(filepath.Join(dir, "request.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &tc); err != nil {
				t.Fatal(err)
			}
			if tc.Path == "" {
				tc.Path = "apps/echoserver/manifests.yaml"
			}
			before, err := os.ReadFile(filepath.Join(dir, "before.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			req := gitsync.RevertRequest{Namespace: "demo", Name: "echoserver", Revision: "7b1e2a9f", Workload: tc.Workload, Images: tc.Images}
			res, err := gitsync.RevertImages(map[string][]byte{tc.Path: before, "README.md": []byte("# not yaml")}, req)
			if err != nil {
				t.Fatal(err)
			}
			out, ok := res.Files[tc.Path]
			if !ok {
				out = before
			}
			golden(t, filepath.Join(dir, "after.yaml"), out)
			if !reflect.DeepEqual(res.Missing, tc.Missing) {
				t.Errorf("Missing = %v, want %v", res.Missing, tc.Missing)
			}
			if len(res.Found)+len(res.Missing) != len(tc.Images) {
				t.Errorf("Found %v + Missing %v do not cover %v", res.Found, res.Missing, tc.Images)
			}
			// Idempotent: reverting the result changes nothing.
			again, err := gitsync.RevertImages(map[string][]byte{tc.Path: out}, req)
			if err != nil || len(again.Files) != 0 {
				t.Fatalf("second revert changed %v, %v", again.Files, err)
			}
		})
	}
}

func TestRevertPushPolicies(t *testing.T) {
	before, _ := os.ReadFile("testdata/revert-deployment/before.yaml")
	values, _ := os.ReadFile("testdata/revert-helm-values/before.yaml")
	srv, repo := newRepo(t, map[string]string{
		"apps/echoserver/deploy.yaml":      string(before),
		"apps/echoserver/chart/values.yml": string(values),
		"apps/echoserver/chart/tpl.txt":    "{{ .Values.image }}",
	})
	req := gitsync.RevertRequest{
		Namespace: "demo", Name: "echoserver", Revision: "7b1e2a9f",
		Workload: gitsync.WorkloadRef{Name: "echoserver"},
		Images:   map[string]string{"app": "ghcr.io/acme/echoserver:1.4.2", "envoy": "envoyproxy/envoy:v1.30.1"},
	}
	opts := gitsync.RevertOptions{TrackedBranch: "main", Paths: []string{"apps/echoserver"}, By: "analysis success-rate failed"}
	out, err := gitsync.Revert(ctx(t), repo, opts, req)
	if err != nil {
		t.Fatal(err)
	}
	wantFiles := []string{"apps/echoserver/chart/values.yml", "apps/echoserver/deploy.yaml"}
	if out.Branch != gitsync.RevertBranch("demo", "echoserver", "7b1e2a9f") || !out.Pushed || !reflect.DeepEqual(out.Files, wantFiles) {
		t.Fatalf("proposed revert = %+v", out)
	}
	if h, _ := srv.Head("app", "main"); h == out.Commit {
		t.Fatal("a proposed revert moved main")
	}
	body, _ := gitLogBody(t, srv, out.Branch)
	if !strings.HasPrefix(body, "rollgate: revert demo/echoserver to stable (revision 7b1e2a9f failed)") ||
		!strings.Contains(body, "- app: ghcr.io/acme/echoserver:1.4.2") {
		t.Fatalf("revert commit message:\n%s", body)
	}
	if again, err := gitsync.Revert(ctx(t), repo, opts, req); err != nil || again.Pushed || again.Commit != out.Commit {
		t.Fatalf("second proposal = %+v, %v", again, err)
	}

	opts.Policy = gitsync.RevertDirect
	direct, err := gitsync.Revert(ctx(t), repo, opts, req)
	if err != nil || !direct.Pushed || direct.Branch != "main" {
		t.Fatalf("direct revert = %+v, %v", direct, err)
	}
	got, _ := srv.ReadFile("app", "main", "apps/echoserver/deploy.yaml")
	if !strings.Contains(got, "image: ghcr.io/acme/echoserver:1.4.2 # bumped by CI") {
		t.Fatalf("main after direct revert:\n%s", got)
	}
	if again, err := gitsync.Revert(ctx(t), repo, opts, req); err != nil || again.Pushed {
		t.Fatalf("direct revert of reverted files = %+v, %v", again, err)
	}

	req.Images = map[string]string{"nothing": "busybox:1"}
	if _, err := gitsync.Revert(ctx(t), repo, opts, req); !errors.Is(err, gitsync.ErrManifestNotFound) {
		t.Fatalf("revert with nothing to find: err = %v", err)
	}
}
