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
// decision within interval x (failureLimit+1)), the release through Git
// (GitSynced within 3 s of the gate), the re-assertions at a gate (the
// step back within 2 s of a write) and the scaled release (pods over the
// step's share for no more than 5 s after a scale event).
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
