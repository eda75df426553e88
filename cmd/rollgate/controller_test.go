package main

import (
	"strings"
	"testing"
)

// TestWatchLabelSelectorIsCheckedFirst: a shard started with a selector
// that does not parse stops at once with a usage error naming the flag,
// before it looks for a cluster.
func TestWatchLabelSelectorIsCheckedFirst(t *testing.T) {
	for _, sel := range []string{"sharding.fluxcd.io/key in (shard1", "sharding.fluxcd.io/key=in=x", "!"} {
		out, code := runMain(t, "controller", "--watch-label-selector", sel)
		if code != exitUsage {
			t.Errorf("--watch-label-selector %q: exit %d, want %d\n%s", sel, code, exitUsage, out)
		}
		for _, want := range []string{"--watch-label-selector", sel, "sharding.fluxcd.io/key in (shard1)"} {
			if !strings.Contains(out, want) {
				t.Errorf("--watch-label-selector %q: output does not say %q:\n%s", sel, want, out)
			}
		}
		if strings.Contains(out, "kubeconfig") {
			t.Errorf("--watch-label-selector %q: looked for a cluster before checking the flag:\n%s", sel, out)
		}
	}
}

// TestWatchLabelSelectorOfFluxShards: the selectors of Flux's sharding
// guide parse; the command goes on to look for a cluster.
func TestWatchLabelSelectorOfFluxShards(t *testing.T) {
	for _, sel := range []string{"!sharding.fluxcd.io/key", "sharding.fluxcd.io/key in (shard1)", "sharding.fluxcd.io/key in (shard1, shard2)"} {
		out, code := runMain(t, "controller", "--watch-label-selector", sel)
		if code != exitError || !strings.Contains(out, "set KUBECONFIG or pass --kubeconfig") {
			t.Errorf("--watch-label-selector %q: exit %d, want %d after looking for a cluster\n%s", sel, code, exitError, out)
		}
	}
}
