package e2e

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/rollgate/rollgate/gitsync"
)

// What the soak measures, and the invariants it checks between releases.

// soakApprovalsBound is what spec.approvals may hold: the entries of the
// gates of the live release and of the stable revision's release.
const soakApprovalsBound = 2 * soakGates

// soakFigures are the soak's measurements.
type soakFigures struct {
	maxApprovals       int // the largest spec.approvals seen in Git
	maxApproveBranches int // the most rollgate/approve/... branches after a release
	revertBranches     int // rollgate/revert/... branches at the end
	statusFirst        int // status file size after release 1, bytes
	statusMax          int
	statusLast         int
	baseMain           int // commits on main and rollgate/status before release 1
	baseStatus         int
}

// memSample is the test process' memory after a release: the controller
// runs in it (with the test's clients; the Git server's git processes
// are separate).
type memSample struct {
	release   int
	heapInuse uint64 // runtime.MemStats.HeapInuse after runtime.GC()
	rss       uint64 // VmRSS of /proc/self/status
}

// observeApprovals measures spec.approvals in Git's main after a change
// there, and checks it against its bound.
func (s *soak) observeApprovals(what string) {
	s.T.Helper()
	as, err := gitsync.ApprovalsIn([]byte(s.readGit(soakRolloutPath)), s.NS, "echoserver")
	if err != nil {
		s.broke("%s: spec.approvals in Git unreadable: %v", what, err)
		return
	}
	s.figures.maxApprovals = max(s.figures.maxApprovals, len(as))
	if len(as) > soakApprovalsBound {
		s.broke("%s: spec.approvals in Git holds %d entries, more than the %d gates of the live and stable releases: %+v", what, len(as), soakApprovalsBound, as)
	}
}

// check checks the invariants that hold between releases: Git declares
// the image the cluster runs, the Rollout in the cluster holds no more
// approvals than Git may, obsolete approval branches are gone; and
// measures the status file.
func (s *soak) check(i int) {
	s.T.Helper()
	if d := s.readGit(soakDeploymentPath); !strings.Contains(d, "image: "+s.stable+"\n") {
		s.broke("Git's main declares\n%s\nwant image %s", d, s.stable)
	}
	if n := len(s.Rollout(s.NS, "echoserver").Spec.Approvals); n > soakApprovalsBound {
		s.broke("the Rollout in the cluster holds %d approvals, more than %d", n, soakApprovalsBound)
	}
	approve := s.branches(gitsync.ApprovalBranchPrefix)
	s.figures.maxApproveBranches = max(s.figures.maxApproveBranches, len(approve))
	if len(approve) > soakGates {
		s.broke("%d approval branches on the Git server, more than the %d gates of a release: %v", len(approve), soakGates, approve)
	}
	s.figures.revertBranches = len(s.branches("rollgate/revert/"))
	file, err := s.git.ReadFile("app", "rollgate/status", s.NS+"/echoserver.yaml")
	if err != nil {
		s.broke("status file: %v", err)
		return
	}
	if i == 1 {
		s.figures.statusFirst = len(file)
	}
	s.figures.statusLast = len(file)
	s.figures.statusMax = max(s.figures.statusMax, len(file))
}

// checkApproveBranches checks, at a gate, that the approval branch of the
// gate is the only one on the Git server: every earlier one, merged or
// not, is gone.
func (s *soak) checkApproveBranches(branch string) {
	s.T.Helper()
	var got []string
	if !s.settles(5*time.Second, func() bool {
		got = s.branches(gitsync.ApprovalBranchPrefix)
		return slices.Equal(got, []string{branch})
	}) {
		s.broke("at the gate of %s, approval branches on the Git server: %v, want only it", branch, got)
	}
}

// gitCLI runs git on the story's bare repository on the server.
func (s *soak) gitCLI(args ...string) string {
	s.T.Helper()
	cmd := exec.Command("git", append([]string{"--git-dir", filepath.Join(s.git.Root, "app.git")}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		s.T.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// branches lists the branches of the repository under prefix.
func (s *soak) branches(prefix string) []string {
	out := s.gitCLI("for-each-ref", "--format=%(refname:strip=2)", "refs/heads/"+prefix)
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// commits counts the commits reachable from branch, 0 when it does not
// exist (yet).
func (s *soak) commits(branch string) int {
	if head, err := s.git.Head("app", branch); err != nil || head == "" {
		return 0
	}
	var n int
	if _, err := fmt.Sscan(s.gitCLI("rev-list", "--count", branch), &n); err != nil {
		s.T.Fatal(err)
	}
	return n
}

// sampleMemory samples the process' memory after releases 1, 100, 365 and
// the last one.
func (s *soak) sampleMemory(i, last int) {
	if i != 1 && i != 100 && i != 365 && i != last {
		return
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s.mem = append(s.mem, memSample{release: i, heapInuse: m.HeapInuse, rss: rss()})
}

// progress prints where a long soak stands, every 50 releases, so that a
// run stopped before its end still says how far it went.
func (s *soak) progress(i int) {
	if i%50 != 0 {
		return
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s.T.Logf("SOAK at release %d after %v: refusals %d, invariant breaks %d, largest spec.approvals %d, restarts %d, heap in use %.1f MiB, RSS %.1f MiB",
		i, time.Since(s.started).Round(time.Second), len(s.refusals), len(s.breaks), s.figures.maxApprovals, s.restarts,
		float64(m.HeapInuse)/(1<<20), float64(rss())/(1<<20))
}

// rss is the process' resident set size, 0 when unknown.
func rss() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			var kb uint64
			fmt.Sscan(v, &kb)
			return kb << 10
		}
	}
	return 0
}

// repoSize is the size on disk of the story's repository on the server.
func (s *soak) repoSize() int64 {
	var n int64
	_ = filepath.WalkDir(filepath.Join(s.git.Root, "app.git"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// report prints the figures, also when the story stopped early.
func (s *soak) report() {
	f := s.figures
	done := max(s.completed, 1)
	var total time.Duration
	for _, d := range s.perRelease {
		total += d
	}
	logf := func(format string, args ...any) { s.T.Logf("SOAK "+format, args...) }
	logf("seed %d: releases completed %d of %d (%d aborted at a gate and reverted); controller restarts %d",
		s.seed, s.completed, s.planned, s.aborted, s.restarts)
	logf("refusals by the API server %d; invariant breaks %d", len(s.refusals), len(s.breaks))
	logf("largest spec.approvals in Git %d (bound %d); approval branches after a release at most %d; revert branches at the end %d",
		f.maxApprovals, soakApprovalsBound, f.maxApproveBranches, f.revertBranches)
	logf("status file on rollgate/status: %d bytes after release 1, %d at most, %d after the last",
		f.statusFirst, f.statusMax, f.statusLast)
	if s.completed > 0 {
		mainN, statusN := s.commits("main"), s.commits("rollgate/status")
		logf("Git commits per release: main %.2f, rollgate/status %.2f (%d and %d over %d releases); repository %d KiB on disk",
			float64(mainN-f.baseMain)/float64(done), float64(statusN-f.baseStatus)/float64(done),
			mainN-f.baseMain, statusN-f.baseStatus, s.completed, s.repoSize()>>10)
		logf("time: %.1f s per release (%v for %d releases, restarts included)",
			total.Seconds()/float64(len(s.perRelease)), time.Since(s.started).Round(time.Second), len(s.perRelease))
	}
	for _, m := range s.mem {
		logf("memory after release %d: heap in use %.1f MiB (after runtime.GC), RSS %.1f MiB (the test process, controller in-process)",
			m.release, float64(m.heapInuse)/(1<<20), float64(m.rss)/(1<<20))
	}
}
