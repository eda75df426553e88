package main

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestControllerBinaryKeepsMethodDeadCode: no function reachable in the
// controller binary looks methods up by name (text/template's execution,
// cobra's help, golang.org/x/net/trace's init, ...). One such function
// makes the linker keep every exported method of every type converted to
// an interface: 13 MB more binary, most of it paged in
// (docs/benchmarks-history.md, P5, runs A to J). The linker's dependency
// dump marks them <ReflectMethod>; the error shows how the first one is
// reached.
func TestControllerBinaryKeepsMethodDeadCode(t *testing.T) {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-dumpdep", "-o", filepath.Join(t.TempDir(), "rollgate-controller"), ".")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	var dump bytes.Buffer
	cmd.Stderr = &dump
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build: %v\n%.2000s", err, dump.String())
	}
	parent := map[string]string{}
	var reflective string
	sc := bufio.NewScanner(&dump)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		from, to, ok := strings.Cut(sc.Text(), " -> ")
		if !ok {
			continue
		}
		if strings.Contains(from, "<ReflectMethod>") && reflective == "" {
			reflective = clean(from)
		}
		if _, seen := parent[clean(to)]; !seen {
			parent[clean(to)] = clean(from)
		}
	}
	if reflective == "" {
		return
	}
	chain := []string{reflective}
	for f := reflective; len(chain) < 40; {
		p, ok := parent[f]
		if !ok || p == f {
			break
		}
		chain = append(chain, p)
		f = p
	}
	t.Errorf("the controller binary reaches %s, which looks methods up by name; reached through:\n  %s", reflective, strings.Join(chain, "\n  <- "))
}

func clean(sym string) string {
	for _, mark := range []string{" <ReflectMethod>", " <UsedInIface>"} {
		sym = strings.ReplaceAll(sym, mark, "")
	}
	return strings.TrimSpace(sym)
}

// TestUsage: bad flags and arguments exit 2 before the controller looks
// for a cluster; --help exits 0.
func TestUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"--no-such-flag"}, exitUsage},
		{[]string{"controller"}, exitUsage},
		{[]string{"--log-level", "loud"}, exitUsage},
		{[]string{"--watch-label-selector", "sharding.fluxcd.io/key in (shard1"}, exitUsage},
		{[]string{"--webhook-timeout-seconds", "0"}, exitUsage},
		{[]string{"--webhook-timeout-seconds", "31"}, exitUsage},
		{[]string{"--webhook-timeout-seconds", "10s"}, exitUsage},
		{[]string{"--max-releases-in-flight", "-1"}, exitUsage},
		{[]string{"--help"}, 0},
	} {
		if got := run(c.args); got != c.want {
			t.Errorf("rollgate-controller %s: exit %d, want %d", strings.Join(c.args, " "), got, c.want)
		}
	}
}
