// Package browser draws pages the way a user sees them, in headless
// Chromium (Debian's, which `make tools` installs: tools-chromium), and
// runs `rollgate dashboard` for the stories that look at it.
package browser

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// chromium is Debian's Chromium.
const chromium = "/usr/bin/chromium"

// Render draws url in headless Chromium and returns the DOM after
// rendering; the screenshot is saved as png.
func Render(t *testing.T, url, png string) string {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("%v: run `make tools` (it installs Debian's chromium)", err)
	}
	profile := t.TempDir()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--user-data-dir=" + profile,
		"--window-size=1200,1000", "--virtual-time-budget=2000"}
	run := func(extra ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(ctx, chromium, append(append(args, extra...), url)...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		start := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %v: %v\n%s", extra, err, errb.String())
		}
		t.Logf("chromium %s took %v", extra[0], time.Since(start).Round(10*time.Millisecond))
		return out.Bytes()
	}
	dom := run("--dump-dom")
	run("--screenshot=" + png)
	if fi, err := os.Stat(png); err != nil || fi.Size() < 5000 {
		t.Fatalf("screenshot %s: %v (a page drawn should be more than a few KB)", png, err)
	}
	return string(dom)
}

// Text is the visible text of a DOM: tags dropped, spaces collapsed.
func Text(dom string) string {
	s := regexp.MustCompile(`(?s)<style.*?</style>|<[^>]+>`).ReplaceAllString(dom, " ")
	return strings.Join(strings.Fields(s), " ")
}

// Dashboard runs `rollgate dashboard` (bin/rollgate, which make build
// builds) against the cluster of kubeconfig for namespace ns, without
// refreshing, until the test ends, and returns its URL once it listens.
func Dashboard(t *testing.T, kubeconfig, ns string) string {
	t.Helper()
	bin := filepath.Join(repo.Root(), "bin", "rollgate")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v: run `make build`", err)
	}
	port := rig.FreePort(t)
	dash, err := proc.Start(t.TempDir(), "dashboard", bin, []string{"dashboard",
		"--kubeconfig", kubeconfig, "-n", ns, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--refresh", "0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dash.Stop(5 * time.Second); err != nil {
			t.Logf("stopping the dashboard: %v", err)
		}
		if t.Failed() {
			t.Logf("dashboard log:\n%s", proc.Tail(dash.Log, 30))
		}
	})
	rig.Eventually(t, 30*time.Second, "the dashboard listening", func(context.Context) (bool, error) {
		return proc.Listening(fmt.Sprintf("127.0.0.1:%d", port)), nil
	})
	return fmt.Sprintf("http://127.0.0.1:%d/", port)
}

// Screenshots is the folder the stories keep their screenshots in, for
// the docs: bin/dashboard.
func Screenshots(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(repo.Root(), "bin", "dashboard")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
