package e2e

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/rollgate/rollgate/test/parallel"
)

// parallelStories is how many stories run side by side unless -parallel
// says otherwise. Every story has a namespace of its own on the package's
// one kwok cluster (sharedCluster), its own Git server and its own
// controller scoped to that namespace, and spends most of its time
// waiting on intervals, pauses and polls, so several share the machine's
// cores well (go test's default is GOMAXPROCS, two on the 2-core machines
// this runs on).
//
// The stories whose assertions carry a time bound do not call t.Parallel:
// go test runs them one after another before the parallel ones start, as
// loaded as before. They are the analysis stories (measurement spacing,
// decision within interval x (failureLimit+1)) and the scaled release (pods
// over the step's share for no more than 5 s after a scale event). The
// release through Git and the re-assertions at a gate print their times
// (GitSynced after the gate; the step back after a write) and assert the
// behaviour: GitSynced names the status branch's head holding the gate; the
// step came back on the write's watch event, long before the resync, and
// held.
const parallelStories = 4

func TestMain(m *testing.M) {
	flag.Parse()
	parallel.Default(parallelStories)
	code := m.Run()
	if err := theCluster.stop(); err != nil {
		fmt.Fprintf(os.Stderr, "deleting the shared kwok cluster: %v\n", err)
		code = 1
	}
	os.Exit(code)
}
