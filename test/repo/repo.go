// Package repo finds the root of the rollgate repository and the test tools
// that `make tools` puts in its git-ignored bin/ folder.
//
// Tests run with the package directory as working directory, and the demo runs
// from anywhere inside the checkout; both walk up to the go.mod of module
// github.com/rollgate/rollgate.
package repo

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// ModulePath is the module path whose go.mod marks the repository root.
const ModulePath = "github.com/rollgate/rollgate"

// FindRoot returns the repository root: the nearest directory, walking up
// from the working directory, whose go.mod declares ModulePath. When the
// working directory is outside the checkout it falls back to the directory of
// this source file (recorded at build time unless built with -trimpath).
func FindRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, start := range starts {
		if root, ok := walkUp(start); ok {
			return root, nil
		}
	}
	return "", fmt.Errorf("no go.mod of module %s above %s", ModulePath, strings.Join(starts, " or "))
}

// Root returns FindRoot's answer and panics when there is none: every caller
// runs inside the checkout, so a missing root is a broken setup, not a
// condition to handle.
func Root() string {
	root, err := FindRoot()
	if err != nil {
		panic(err)
	}
	return root
}

// ToolsDir returns the folder `make tools` fills: Root()/bin.
func ToolsDir() string {
	return filepath.Join(Root(), "bin")
}

// ErrToolMissing is wrapped by LookTool when a tool is not in bin/.
var ErrToolMissing = errors.New("not found in bin/: run 'make tools'")

// LookTool returns the path of bin/<name> or bin/k8s/<name>, whichever exists
// and is executable, or an error wrapping ErrToolMissing.
func LookTool(name string) (string, error) {
	root, err := FindRoot()
	if err != nil {
		return "", err
	}
	for _, dir := range []string{"bin", filepath.Join("bin", "k8s")} {
		p := filepath.Join(root, dir, name)
		info, err := os.Stat(p) // follows symlinks (etcd, prometheus)
		if err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s %w", name, ErrToolMissing)
}

// Tool returns the path of bin/<name> or bin/k8s/<name>. A missing tool fails
// the test (it never skips): the platform is part of the test, and
// `make test` builds it first.
func Tool(t testing.TB, name string) string {
	t.Helper()
	p, err := LookTool(name)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return p
}

func walkUp(dir string) (string, bool) {
	for {
		if isRoot(filepath.Join(dir, "go.mod")) {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

func isRoot(goMod string) bool {
	f, err := os.Open(goMod)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == ModulePath
		}
	}
	return false
}

// HTTPRouteCRD returns the path of Gateway API's HTTPRoute CRD of channel
// ("standard" or "experimental"), of the version rollgate is built with
// (go.mod's sigs.k8s.io/gateway-api), from the Go module cache: the CRD
// the tests install is the one the project's Go types were generated
// from, and no copy of it lives in the repository. It panics when the
// module cannot be found (a broken setup, as in Root).
func HTTPRouteCRD(channel string) string {
	gatewayAPI.once.Do(func() {
		cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api")
		cmd.Dir = Root()
		out, err := cmd.Output()
		if err != nil {
			gatewayAPI.err = fmt.Errorf("finding module sigs.k8s.io/gateway-api: %w", err)
			return
		}
		gatewayAPI.dir = strings.TrimSpace(string(out))
	})
	if gatewayAPI.err != nil {
		panic(gatewayAPI.err)
	}
	p := filepath.Join(gatewayAPI.dir, "config", "crd", channel, "gateway.networking.k8s.io_httproutes.yaml")
	if _, err := os.Stat(p); err != nil {
		panic(fmt.Errorf("the HTTPRoute CRD of channel %s: %w", channel, err))
	}
	return p
}

var gatewayAPI struct {
	once sync.Once
	dir  string
	err  error
}
