package realtraffic

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/rollgate/rollgate/test/parallel"
	"github.com/rollgate/rollgate/test/realnode"
)

// storyImages are the images every story imports into its node: built
// once per test binary, not once per story (the tarballs are the same).
var storyImages = &imageSet{}

// imageSet builds the sample application's four versions and the
// controller's image the first time they are asked for. The controller's
// is an image index of linux/amd64 and linux/arm64 built as `make dist`
// builds it: the node runs the image of its own platform from the index.
type imageSet struct {
	once   sync.Once
	dir    string
	images []realnode.Image
	err    error
}

func (s *imageSet) get(ctx context.Context) ([]realnode.Image, error) {
	s.once.Do(func() {
		if s.dir, s.err = os.MkdirTemp("", "rollgate-realtraffic-images-"); s.err != nil {
			return
		}
		for _, v := range []string{"v1", "v2", "v3", "v4"} {
			img, err := realnode.SampleApp(ctx, s.dir, v)
			if err != nil {
				s.err = err
				return
			}
			s.images = append(s.images, img)
		}
		ctrl, err := realnode.ControllerIndex(ctx, s.dir, controllerImage)
		if err != nil {
			s.err = err
			return
		}
		s.images = append(s.images, ctrl)
	})
	return s.images, s.err
}

// buildImages builds the story images before any story starts, so that no
// story's deadline counts the build: from a cold Go build cache the
// images' -trimpath builds compile every dependency again (more than 12
// minutes on a fresh 2-core machine at load 10, when it ran inside the
// first story). It prints what it does and how long it took.
func buildImages() int {
	if f := flag.Lookup("test.list"); f != nil && f.Value.String() != "" {
		return 0
	}
	start := time.Now()
	fmt.Fprintln(os.Stderr, "realtraffic: building the story images (the sample app v1-v4, and the controller's image index for linux/amd64 and linux/arm64)")
	ctx, cancel := context.WithTimeout(context.Background(), nodeSetupBudget)
	defer cancel()
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(30 * time.Second):
				fmt.Fprintf(os.Stderr, "  ... still building the story images (%s)\n", time.Since(start).Round(time.Second))
			}
		}
	}()
	_, err := storyImages.get(ctx)
	close(done)
	if err != nil {
		fmt.Fprintf(os.Stderr, "realtraffic: building the story images: %v\n", err)
		storyImages.remove()
		return 1
	}
	fmt.Fprintf(os.Stderr, "realtraffic: story images built in %s\n", time.Since(start).Round(time.Second))
	return 0
}

// remove deletes the tarballs.
func (s *imageSet) remove() {
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// parallelStories is how many stories run side by side on the node unless
// -parallel says otherwise (go test's default is GOMAXPROCS, two here).
// The stories spend most of their time waiting on pods, pauses and
// windows of requests. TestReleaseUnderLoad does not call t.Parallel: it
// deletes the controller's pod and upgrades the chart, so it runs alone,
// before the others start. Two, not four: every story asserts that no
// request fails, and with four stories (four Traefiks, four load
// generators, real pods probed every second) beside test/e2e's stories,
// in a fresh-clone `bash .ci/run` on 2026-11-26, the load reached 48 and
// Traefik answered 12-84 requests per story with 502 while it caught up
// with removed endpoints (docs/development.md).
const parallelStories = 2

func TestMain(m *testing.M) {
	flag.Parse()
	parallel.Default(parallelStories)
	// The clients log nothing the stories need (and controller-runtime
	// complains with a stack trace when no logger is set).
	ctrllog.SetLogger(logr.Discard())
	if code := buildImages(); code != 0 {
		os.Exit(code)
	}
	code := m.Run()
	if err := theNode.stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stop the real node and restore the host: %v\n", err)
		code = 1
	}
	storyImages.remove()
	os.Exit(code)
}
