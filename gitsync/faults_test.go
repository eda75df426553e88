package gitsync_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

const (
	faultRev  = "7b1e2a9f"
	faultStep = 1
)

// faultRepo starts a Git server whose main branch holds the Rollout
// manifest demo/echoserver at rolloutPath, and a faultProxy in front of it.
// It returns the server, the proxy and the repository URL through the
// proxy.
func faultRepo(t *testing.T, opts gitserver.Options) (*gitserver.Server, *faultProxy, string) {
	t.Helper()
	manifest, err := os.ReadFile("testdata/approve-create-list/before.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := gitserver.Start(t, opts)
	if _, err := srv.CreateRepo("app", map[string]string{rolloutPath: string(manifest)}); err != nil {
		t.Fatal(err)
	}
	p := newFaultProxy(t, srv.URL)
	return srv, p, p.URL() + "/app.git"
}

// approvedLocally reads the approval of demo/echoserver the way the
// reconciler does: from the last fetched head of main, without network.
func approvedLocally(t *testing.T, repo *gitsync.Repository, step int) bool {
	t.Helper()
	snap, err := repo.LocalSnapshot("main")
	if err != nil {
		t.Fatalf("LocalSnapshot: %v", err)
	}
	data, err := snap.ReadFile(rolloutPath)
	if err != nil {
		t.Fatalf("reading the manifest from the last fetch: %v", err)
	}
	as, err := gitsync.ApprovalsIn(data, "demo", "echoserver")
	if err != nil {
		t.Fatal(err)
	}
	return gitsync.HasApproval(as, gitsync.Approval{Revision: faultRev, Step: step})
}

// checkStatus fails unless the status branch holds exactly want, read by
// reader (an independent client; by default an anonymous one on url).
func checkStatus(t *testing.T, url string, want map[string]gitsync.RolloutState, reader ...*gitsync.Repository) {
	t.Helper()
	if len(reader) == 0 {
		r := openRepo(t, gitsync.Options{URL: url})
		reader = append(reader, r)
	}
	got, err := gitsync.ReadStatus(ctx(t), reader[0], gitsync.DefaultStatusBranch)
	if err != nil {
		t.Fatalf("ReadStatus: %v", err)
	}
	if len(got) != len(want) {
		t.Errorf("status branch holds %d rollouts, want %d", len(got), len(want))
	}
	for _, s := range got {
		if w, ok := want[s.Namespace+"/"+s.Name]; !ok || !reflect.DeepEqual(s, w) {
			t.Errorf("%s/%s in Git:\n%+v\nwant:\n%+v", s.Namespace, s.Name, s, w)
		}
	}
}

// enqueueAll enqueues state(ns, name-i, step) for n rollouts into w and
// want.
func enqueueAll(w *gitsync.Writer, want map[string]gitsync.RolloutState, n, step int) {
	for i := range n {
		s := state("demo", fmt.Sprintf("r%02d", i), step)
		w.Enqueue(s)
		want["demo/"+s.Name] = s
	}
}

// TestFaultServerDown takes the Git server away twice (503 from a proxy,
// then nothing listening on its address) and brings it back on the same
// URL: flushes fail, nothing enqueued is lost, reads of the tracked branch
// fail instead of answering stale approvals, and once the server is back
// the next flush writes every state and the merged approval is seen.
func TestFaultServerDown(t *testing.T) {
	srv, proxy, url := faultRepo(t, gitserver.Options{})
	repo := openRepo(t, gitsync.Options{URL: url, RetryBackoff: time.Millisecond})
	w := newWriter(t, repo, gitsync.WriterOptions{Window: 20 * time.Millisecond})
	want := map[string]gitsync.RolloutState{}
	enqueueAll(w, want, 10, 1)
	first, err := w.Flush(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Fetch(ctx(t), "main"); err != nil {
		t.Fatal(err)
	}
	p, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", gitsync.Approval{Revision: faultRev, Step: faultStep}, "test")
	if err != nil || !p.Pushed {
		t.Fatalf("proposal = %+v, %v", p, err)
	}

	for _, outage := range []struct {
		name  string
		start func()
	}{
		{"503", func() { proxy.setMode(proxyUnavailable) }},
		{"connection refused", proxy.down},
	} {
		t.Run(outage.name, func(t *testing.T) {
			outage.start()
			enqueueAll(w, want, 10, 2+len(want)%3)
			w.Remove("demo", "r09")
			delete(want, "demo/r09")
			_, err := w.Flush(ctx(t))
			if err == nil {
				t.Fatal("flush succeeded with the server down")
			}
			t.Logf("flush error: %v", err)
			if errors.Is(err, gitsync.ErrAuth) || errors.Is(err, gitsync.ErrNonFastForward) {
				t.Errorf("outage misclassified: %v", err)
			}
			if !w.Pending() {
				t.Error("a failed flush cleared the pending states")
			}
			if _, _, last := w.LastFlush(); last == nil {
				t.Error("LastFlush reports no error")
			}
			// Someone merges the approval meanwhile: the caller gets an
			// error, and the last fetched head still has no approval.
			if _, err := srv.Merge("app", "main", p.Branch, "Merge approval"); err != nil {
				t.Fatal(err)
			}
			if err := repo.Fetch(ctx(t), "main"); err == nil {
				t.Error("Fetch succeeded with the server down")
			}
			if as, err := gitsync.ApprovalsOnBranch(ctx(t), repo, "main", rolloutPath, "demo", "echoserver"); err == nil || as != nil {
				t.Errorf("ApprovalsOnBranch = %v, %v with the server down; want an error", as, err)
			}
			if approvedLocally(t, repo, faultStep) {
				t.Error("an approval appeared without a fetch")
			}
			// The writer keeps trying through Start; every try fails.
			c, stop := context.WithCancel(ctx(t))
			done := make(chan error, 1)
			go func() { done <- w.Start(c) }()
			time.Sleep(100 * time.Millisecond)
			_, at, last := w.LastFlush()
			if last == nil || !w.Pending() {
				t.Errorf("Start during the outage: last flush at %v err %v, pending %v", at, last, w.Pending())
			}

			// The server is back on the same URL.
			if outage.name == "503" {
				proxy.setMode(proxyUp)
			} else {
				proxy.up()
			}
			deadline := time.Now().Add(20 * time.Second)
			for w.Pending() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			stop()
			<-done
			res, _, err := w.LastFlush()
			if err != nil || w.Pending() {
				t.Fatalf("after the outage: pending %v, last flush %+v, %v", w.Pending(), res, err)
			}
			checkStatus(t, url, want)
			if h, _ := srv.Head("app", gitsync.DefaultStatusBranch); w.Written("demo", "r00") != h {
				t.Errorf("Written(r00) = %s, branch at %s", w.Written("demo", "r00"), h)
			}
			if !isAncestor(t, srv, first.Commit, gitsync.DefaultStatusBranch) {
				t.Error("status history was rewritten")
			}
			if err := repo.Fetch(ctx(t), "main"); err != nil {
				t.Fatal(err)
			}
			if !approvedLocally(t, repo, faultStep) {
				t.Error("the approval merged during the outage is not seen after it")
			}
			// Undo the merge for the next outage.
			base := mustBareGit(t, srv, "rev-parse", "refs/heads/main^1")
			mustBareGit(t, srv, "update-ref", "refs/heads/main", base)
			if err := repo.Fetch(ctx(t), "main"); err != nil || approvedLocally(t, repo, faultStep) {
				t.Fatalf("resetting main: %v", err)
			}
		})
	}
	gitFsck(t, srv)
}

// TestFaultServerHangs: a Git host that accepts connections and never
// answers. Every exchange is bounded by Options.Timeout, so the flush
// fails in time, the Repository is not held (LocalSnapshot, which the
// reconciler calls on every pass, waits at most that long), and the writer
// recovers once the host answers again.
func TestFaultServerHangs(t *testing.T) {
	const timeout = 300 * time.Millisecond
	srv, proxy, url := faultRepo(t, gitserver.Options{})
	repo := openRepo(t, gitsync.Options{URL: url, RetryBackoff: time.Millisecond, Timeout: timeout})
	// The first fetch, through the proxy passing everything, sets the
	// story up; it is bounded by the same short timeout, which a loaded
	// machine can exceed (seen at load 4 beside a full make test), so it
	// is tried again, as the writer does (go-git does not keep the
	// deadline in its error chain: "unexpected client error: ... context
	// deadline exceeded").
	for try := 1; ; try++ {
		err := repo.Fetch(ctx(t), "main")
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), context.DeadlineExceeded.Error()) || try == 20 {
			t.Fatalf("setting up, fetch %d through a healthy proxy: %v", try, err)
		}
	}
	w := newWriter(t, repo, gitsync.WriterOptions{Window: 20 * time.Millisecond})
	want := map[string]gitsync.RolloutState{}
	enqueueAll(w, want, 5, 1)

	proxy.setMode(proxyHang)
	start := time.Now()
	_, err := w.Flush(ctx(t))
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || took > 10*timeout {
		t.Fatalf("flush against a hung server: %v after %v; want a deadline error after ~%v", err, took, timeout)
	}
	t.Logf("flush against a hung server failed after %v: %v", took.Round(time.Millisecond), err)

	// The writer keeps trying; reads of the last fetch stay available.
	c, stop := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	go func() { done <- w.Start(c) }()
	var worst time.Duration
	for range 5 {
		t0 := time.Now()
		if approvedLocally(t, repo, faultStep) {
			t.Fatal("approved out of nowhere")
		}
		worst = max(worst, time.Since(t0))
		time.Sleep(20 * time.Millisecond)
	}
	if worst > 10*timeout {
		t.Errorf("LocalSnapshot blocked %v behind a hung exchange (timeout %v)", worst, timeout)
	}
	t.Logf("LocalSnapshot waited at most %v behind hung exchanges", worst.Round(time.Millisecond))

	proxy.setMode(proxyUp)
	deadline := time.Now().Add(20 * time.Second)
	for w.Pending() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	if _, _, err := w.LastFlush(); err != nil || w.Pending() {
		t.Fatalf("after the hang: pending %v, %v", w.Pending(), err)
	}
	checkStatus(t, url, want)
	_ = srv
}

// TestFaultAuth: wrong credentials give ErrAuth on every path without the
// secret in any message; the right credentials (a Repository reopened
// after the Secret was fixed, as the reconciler does) write everything,
// including what the old Writer still held (Adopt).
func TestFaultAuth(t *testing.T) {
	srv, _, url := faultRepo(t, gitserver.Options{Username: "bot", Password: password})
	creds := func(pw string) *gitsync.Credentials {
		c, err := gitsync.CredentialsFromSecret(map[string][]byte{"username": []byte("bot"), "password": []byte(pw)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	bad := openRepo(t, gitsync.Options{URL: url, Credentials: creds(password + "-old"), InsecureHTTP: true})
	w := newWriter(t, bad, gitsync.WriterOptions{})
	want := map[string]gitsync.RolloutState{}
	enqueueAll(w, want, 5, 1)
	_, flushErr := w.Flush(ctx(t))
	_, _, lastErr := w.LastFlush()
	fetchErr := bad.Fetch(ctx(t), "main")
	_, approvalsErr := gitsync.ApprovalsOnBranch(ctx(t), bad, "main", rolloutPath, "demo", "echoserver")
	_, proposeErr := gitsync.ProposeApproval(ctx(t), bad, "main", rolloutPath, "demo", "echoserver", gitsync.Approval{Revision: faultRev, Step: faultStep}, "")
	for name, err := range map[string]error{"Flush": flushErr, "LastFlush": lastErr, "Fetch": fetchErr, "ApprovalsOnBranch": approvalsErr, "ProposeApproval": proposeErr} {
		if !errors.Is(err, gitsync.ErrAuth) {
			t.Errorf("%s: err = %v, want ErrAuth", name, err)
			continue
		}
		noSecret(t, name+" error", err.Error())
		noSecret(t, name+" error", fmt.Sprintf("%+v %#v", err, err))
	}
	t.Logf("flush with a wrong password: %v", flushErr)
	if !w.Pending() {
		t.Fatal("a rejected flush cleared the pending states")
	}
	if h, _ := srv.Head("app", gitsync.DefaultStatusBranch); h != "" {
		t.Fatal("something was written with wrong credentials")
	}

	// The Secret is fixed: a new Repository and Writer take over what the
	// old Writer held, and write it.
	good := openRepo(t, gitsync.Options{URL: url, Credentials: creds(password), InsecureHTTP: true})
	w2 := newWriter(t, good, gitsync.WriterOptions{})
	w2.Adopt(w)
	if !w2.Pending() {
		t.Fatal("Adopt took over nothing")
	}
	res, err := w2.Flush(ctx(t))
	if err != nil || len(res.Changed) != 5 {
		t.Fatalf("flush with the right password = %+v, %v", res, err)
	}
	// A state enqueued on the new Writer before Adopt wins over the old one.
	w3 := newWriter(t, good, gitsync.WriterOptions{})
	newer := state("demo", "r00", 3)
	w3.Enqueue(newer)
	w3.Adopt(w)
	want["demo/r00"] = newer
	if _, err := w3.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	reader := openRepo(t, gitsync.Options{URL: url, Credentials: creds(password), InsecureHTTP: true})
	checkStatus(t, url, want, reader)
}

// foreignCommit lands a commit of another user on the status branch, with
// one file outside the status files, and returns its hash.
func foreignCommit(t *testing.T, srv *gitserver.Server, name string) string {
	t.Helper()
	h, err := commitRetrying(context.Background(), srv, gitsync.DefaultStatusBranch, "foreign "+name,
		map[string]string{"other/" + name + ".txt": name + "\n"})
	if err != nil {
		t.Error(err)
	}
	return h
}

// TestFaultNonFastForward lands a foreign push on the status branch at
// each point of a flush where the branch can move under it: between the
// listing and the fetch, between the fetch and the push (caught by the
// lease against the push advertisement), and between the push
// advertisement and the push itself (caught by the server). The flush is
// rebuilt on the new head; every foreign commit stays in history.
func TestFaultNonFastForward(t *testing.T) {
	cases := []struct {
		name         string
		at           func(r *http.Request, n int) bool // n counts requests of r's kind in this flush
		wantAttempts int
	}{
		{"between listing and fetch", func(r *http.Request, n int) bool {
			return r.Method == http.MethodGet && strings.Contains(r.URL.RawQuery, "git-upload-pack") && n == 2
		}, 1},
		{"between fetch and push", func(r *http.Request, n int) bool {
			return r.Method == http.MethodGet && strings.Contains(r.URL.RawQuery, "git-receive-pack") && n == 1
		}, 2},
		{"between push advertisement and push", func(r *http.Request, n int) bool {
			return isReceivePack(r) && n == 1
		}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, proxy, url := faultRepo(t, gitserver.Options{})
			repo := openRepo(t, gitsync.Options{URL: url, RetryBackoff: time.Millisecond})
			w := newWriter(t, repo, gitsync.WriterOptions{})
			want := map[string]gitsync.RolloutState{}
			enqueueAll(w, want, 5, 1)
			if _, err := w.Flush(ctx(t)); err != nil {
				t.Fatal(err)
			}
			// The branch moved since our last push, so the flush has to
			// fetch (listing, then fetch).
			foreign := []string{foreignCommit(t, srv, "before")}
			counts := map[string]int{}
			var fired atomic.Bool
			var mu sync.Mutex
			proxy.setHook(func(r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				kind := r.Method + r.URL.Path + r.URL.RawQuery
				counts[kind]++
				if !fired.Load() && c.at(r, counts[kind]) {
					fired.Store(true)
					foreign = append(foreign, foreignCommit(t, srv, "racing"))
				}
			})
			enqueueAll(w, want, 5, 2)
			res, err := w.Flush(ctx(t))
			proxy.setHook(nil)
			if err != nil {
				t.Fatalf("flush: %v", err)
			}
			if !fired.Load() {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("the foreign push was never injected (requests %v)", counts)
			}
			if res.Attempts != c.wantAttempts || len(res.Changed) != 5 {
				t.Errorf("flush = %+v, want %d attempt(s) and 5 rollouts", res, c.wantAttempts)
			}
			if h, _ := srv.Head("app", gitsync.DefaultStatusBranch); h != res.Commit {
				t.Errorf("branch at %s, flush reported %s", h, res.Commit)
			}
			for i, h := range foreign {
				if !isAncestor(t, srv, h, gitsync.DefaultStatusBranch) {
					t.Errorf("foreign commit %d lost from history", i)
				}
			}
			for _, f := range []string{"other/before.txt", "other/racing.txt"} {
				if _, err := srv.ReadFile("app", gitsync.DefaultStatusBranch, f); err != nil {
					t.Errorf("%s lost: %v", f, err)
				}
			}
			checkStatus(t, url, want)
			gitFsck(t, srv)
		})
	}
}

// TestFaultStatusBranchRewritten: someone force-pushes the status branch to
// an unrelated commit. The next flush re-derives every status file on top
// of the new head and keeps what the rewrite brought.
func TestFaultStatusBranchRewritten(t *testing.T) {
	srv, _, url := faultRepo(t, gitserver.Options{})
	repo := openRepo(t, gitsync.Options{URL: url, RetryBackoff: time.Millisecond})
	w := newWriter(t, repo, gitsync.WriterOptions{})
	want := map[string]gitsync.RolloutState{}
	enqueueAll(w, want, 10, 1)
	old, err := w.Flush(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	// An unrelated root commit (main's tree, no parent) replaces the branch.
	tree := mustBareGit(t, srv, "rev-parse", "refs/heads/main^{tree}")
	unrelated := mustBareGit(t, srv, "commit-tree", tree, "-m", "rewritten by hand")
	mustBareGit(t, srv, "update-ref", "refs/heads/"+gitsync.DefaultStatusBranch, unrelated)

	// One Rollout changes; every file of ours comes back.
	s := state("demo", "r03", 2)
	w.Enqueue(s)
	want["demo/r03"] = s
	res, err := w.Flush(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Changed) != 10 {
		t.Errorf("re-derived %d files, want all 10 (%v)", len(res.Changed), res.Changed)
	}
	if parent := mustBareGit(t, srv, "rev-parse", res.Commit+"^"); parent != unrelated {
		t.Errorf("status commit built on %s, want the rewritten head %s", parent, unrelated)
	}
	if isAncestor(t, srv, old.Commit, gitsync.DefaultStatusBranch) {
		t.Error("the old history came back")
	}
	if _, err := srv.ReadFile("app", gitsync.DefaultStatusBranch, rolloutPath); err != nil {
		t.Errorf("content of the rewritten branch lost: %v", err)
	}
	if w.Written("demo", "r00") != res.Commit {
		t.Errorf("Written(r00) = %s, want %s", w.Written("demo", "r00"), res.Commit)
	}
	checkStatus(t, url, want)
	gitFsck(t, srv)
}

// TestFaultTrackedBranchRewritten: an approval merged into main counts only
// while it is in main's history. Force-pushing main back to before the
// merge, or to an unrelated history without it, withdraws the approval
// for both ways of reading it (Fetch + LocalSnapshot, ApprovalsOnBranch).
func TestFaultTrackedBranchRewritten(t *testing.T) {
	srv, _, url := faultRepo(t, gitserver.Options{})
	repo := openRepo(t, gitsync.Options{URL: url, RetryBackoff: time.Millisecond})
	viaBranch := func() bool {
		t.Helper()
		as, err := gitsync.ApprovalsOnBranch(ctx(t), repo, "main", rolloutPath, "demo", "echoserver")
		if err != nil {
			t.Fatal(err)
		}
		return gitsync.HasApproval(as, gitsync.Approval{Revision: faultRev, Step: faultStep})
	}
	viaFetch := func() bool {
		t.Helper()
		if err := repo.Fetch(ctx(t), "main"); err != nil {
			t.Fatal(err)
		}
		return approvedLocally(t, repo, faultStep)
	}
	before := mustBareGit(t, srv, "rev-parse", "refs/heads/main")
	p, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", gitsync.Approval{Revision: faultRev, Step: faultStep}, "")
	if err != nil {
		t.Fatal(err)
	}
	merge := func() {
		t.Helper()
		if _, err := srv.Merge("app", "main", p.Branch, "Merge approval"); err != nil {
			t.Fatal(err)
		}
		if !viaFetch() || !viaBranch() {
			t.Fatal("merged approval not seen")
		}
	}

	merge()
	mustBareGit(t, srv, "update-ref", "refs/heads/main", before)
	if viaFetch() || viaBranch() {
		t.Error("approval still counts after main was reset to before the merge")
	}

	merge()
	tree := mustBareGit(t, srv, "rev-parse", before+"^{tree}")
	rewritten := mustBareGit(t, srv, "commit-tree", tree, "-m", "history rewritten")
	mustBareGit(t, srv, "update-ref", "refs/heads/main", rewritten)
	if viaFetch() || viaBranch() {
		t.Error("approval still counts after main was rewritten without it")
	}
	if h, err := repo.Head("main"); err != nil || h != rewritten {
		t.Errorf("Head(main) = %s, %v; want the rewritten %s", h, err, rewritten)
	}
}

// corruptions damage an on-disk store (Options.Dir) the ways a crash, a
// full disk or a bad volume do.
var corruptions = []struct {
	name string
	do   func(t *testing.T, dir string)
}{
	{"delete loose objects", func(t *testing.T, dir string) { walkObjects(t, dir, isLoose, os.Remove) }},
	{"garble loose objects", func(t *testing.T, dir string) { walkObjects(t, dir, isLoose, garble) }},
	{"garble packs", func(t *testing.T, dir string) { walkObjects(t, dir, hasExt(".pack"), garble) }},
	{"truncate packs", func(t *testing.T, dir string) {
		walkObjects(t, dir, hasExt(".pack"), func(p string) error { return os.Truncate(p, 20) })
	}},
	{"delete pack indexes", func(t *testing.T, dir string) { walkObjects(t, dir, hasExt(".idx"), os.Remove) }},
	{"delete objects", func(t *testing.T, dir string) { must(t, os.RemoveAll(filepath.Join(dir, "objects"))) }},
	{"garble tracking refs", func(t *testing.T, dir string) {
		for _, b := range []string{"main", gitsync.DefaultStatusBranch} {
			must(t, os.WriteFile(filepath.Join(dir, "refs/remotes/origin", b), []byte("not a hash\n"), 0o644))
		}
	}},
	{"garble config", func(t *testing.T, dir string) {
		must(t, os.WriteFile(filepath.Join(dir, "config"), []byte("[[[garbage\n"), 0o644))
	}},
	{"wipe", func(t *testing.T, dir string) {
		entries, err := os.ReadDir(dir)
		must(t, err)
		for _, e := range entries {
			must(t, os.RemoveAll(filepath.Join(dir, e.Name())))
		}
	}},
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func isLoose(p string) bool {
	return !strings.Contains(p, string(filepath.Separator)+"pack"+string(filepath.Separator))
}

func hasExt(ext string) func(string) bool {
	return func(p string) bool { return filepath.Ext(p) == ext }
}

// garble flips bytes all over a file, past its first few.
func garble(p string) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	for i := 8; i < len(data); i += 5 {
		data[i] ^= 0x5a
	}
	return os.WriteFile(p, data, 0o644)
}

// walkObjects applies f to the files under dir/objects that match, and
// fails the test when none do (the corruption would test nothing).
func walkObjects(t *testing.T, dir string, match func(string) bool, f func(string) error) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(filepath.Join(dir, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !match(p) {
			return err
		}
		n++
		_ = os.Chmod(p, 0o644) // go-git writes objects read-only
		return f(p)
	})
	must(t, err)
	if n == 0 {
		t.Fatal("no object file to corrupt")
	}
}

// TestFaultCorruptLocalClone damages the on-disk store under a running
// Repository, and again before a restart on the same Dir: the Repository
// notices the damage, drops the store, fetches afresh, and the next
// write and reads succeed.
func TestFaultCorruptLocalClone(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			srv, _, url := faultRepo(t, gitserver.Options{})
			dir := t.TempDir()
			repo := openRepo(t, gitsync.Options{URL: url, Dir: dir, RetryBackoff: time.Millisecond})
			w := newWriter(t, repo, gitsync.WriterOptions{})
			want := map[string]gitsync.RolloutState{}
			// Loose objects (our commits) and packs (fetched commits).
			enqueueAll(w, want, 5, 1)
			if _, err := w.Flush(ctx(t)); err != nil {
				t.Fatal(err)
			}
			foreignCommit(t, srv, "x")
			enqueueAll(w, want, 5, 2)
			if _, err := w.Flush(ctx(t)); err != nil {
				t.Fatal(err)
			}
			if err := repo.Fetch(ctx(t), "main"); err != nil {
				t.Fatal(err)
			}
			foreignCommit(t, srv, "y")

			check := func(repo *gitsync.Repository, w *gitsync.Writer, step int) {
				t.Helper()
				enqueueAll(w, want, 5, step)
				if _, err := w.Flush(ctx(t)); err != nil {
					t.Fatalf("flush on the damaged copy: %v", err)
				}
				if _, err := gitsync.ApprovalsOnBranch(ctx(t), repo, "main", rolloutPath, "demo", "echoserver"); err != nil {
					t.Fatalf("reading approvals on the damaged copy: %v", err)
				}
				if _, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", gitsync.Approval{Revision: faultRev, Step: step}, ""); err != nil {
					t.Fatalf("proposing on the damaged copy: %v", err)
				}
				checkStatus(t, url, want, repo)
			}

			// Under the running Repository.
			c.do(t, dir)
			check(repo, w, 3)

			// Before a restart on the same Dir.
			c.do(t, dir)
			repo2, err := gitsync.Open(gitsync.Options{URL: url, Dir: dir, RetryBackoff: time.Millisecond})
			if err != nil {
				t.Fatalf("reopening the damaged copy: %v", err)
			}
			if _, err := repo2.LocalSnapshot("main"); err != nil {
				t.Logf("LocalSnapshot before any fetch: %v", err)
			}
			w2 := newWriter(t, repo2, gitsync.WriterOptions{})
			w2.Adopt(w)
			check(repo2, w2, 1)
			if _, err := repo2.LocalSnapshot("main"); err != nil {
				t.Errorf("LocalSnapshot after the repair: %v", err)
			}
			// What the copy serves is whole: every object of both heads
			// reads back (git archive inflates every blob).
			for _, b := range []string{"main", gitsync.DefaultStatusBranch} {
				if out, err := exec.Command("git", "--git-dir="+dir, "archive", "refs/remotes/origin/"+b).CombinedOutput(); err != nil {
					t.Errorf("git archive %s of the repaired copy: %v\n%.500s", b, err, out)
				}
			}
			gitFsck(t, srv)
		})
	}
}
