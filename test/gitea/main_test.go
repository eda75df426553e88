package gitea_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/rollgate/rollgate/test/gitea"
	"github.com/rollgate/rollgate/test/proc"
)

// forgeServer is the one Gitea every test of the package shares, started
// by TestMain; each test works in repositories of its own.
var forgeServer *gitea.Server

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "rollgate-gitea-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "gitea: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	began := time.Now()
	s, err := gitea.Start(ctx, gitea.Options{Dir: dir})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start Gitea: %v\n", err)
		_ = os.RemoveAll(dir)
		return 1
	}
	fmt.Printf("Gitea at %s, up in %.1f s (work path %s)\n", s.URL, time.Since(began).Seconds(), dir)
	forgeServer = s
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stop Gitea: %v\n", err)
		code = 1
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "last lines of Gitea's log %s (work path kept):\n%s\n", s.Log(), proc.Tail(s.Log(), 40))
		return code
	}
	_ = os.RemoveAll(dir)
	return code
}
