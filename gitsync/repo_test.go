package gitsync_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

// newRepo starts a server with one repository holding files and opens it.
func newRepo(t *testing.T, files map[string]string) (*gitserver.Server, *gitsync.Repository) {
	t.Helper()
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", files)
	if err != nil {
		t.Fatal(err)
	}
	repo := openRepo(t, gitsync.Options{URL: url, RetryBackoff: time.Millisecond})
	return srv, repo
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// openRepo opens the Repository opts name, failing the test when it
// cannot.
func openRepo(t testing.TB, opts gitsync.Options) *gitsync.Repository {
	t.Helper()
	repo, err := gitsync.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// gitLog returns the subjects of branch, newest first, read by the git CLI
// on the server's bare repository.
func gitLog(t *testing.T, srv *gitserver.Server, branch string) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", srv.Root+"/app.git", "log", "--format=%s", branch).CombinedOutput()
	if err != nil {
		t.Fatalf("git log %s: %v: %s", branch, err, out)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// gitFsck checks the server repository is consistent.
func gitFsck(t *testing.T, srv *gitserver.Server) {
	t.Helper()
	out, err := exec.Command("git", "-C", srv.Root+"/app.git", "fsck", "--strict").CombinedOutput()
	if err != nil {
		t.Fatalf("git fsck: %v: %s", err, out)
	}
}

func TestReadFileAndUpdate(t *testing.T) {
	srv, repo := newRepo(t, map[string]string{"apps/a.yaml": "a: 1\n", "README.md": "hi\n"})
	got, err := repo.ReadFile(ctx(t), "main", "apps/a.yaml")
	if err != nil || string(got) != "a: 1\n" {
		t.Fatalf("ReadFile = %q, %v", got, err)
	}
	if _, err := repo.ReadFile(ctx(t), "main", "nope.yaml"); !errors.Is(err, gitsync.ErrFileNotFound) {
		t.Fatalf("missing file: err = %v, want ErrFileNotFound", err)
	}
	if _, err := repo.ReadFile(ctx(t), "nope", "a.yaml"); !errors.Is(err, gitsync.ErrBranchNotFound) {
		t.Fatalf("missing branch: err = %v, want ErrBranchNotFound", err)
	}

	// Another push is not seen until the next fetch.
	if _, err := srv.Commit("app", "main", "theirs", map[string]string{"apps/a.yaml": "a: 9\n"}); err != nil {
		t.Fatal(err)
	}
	local, err := repo.LocalSnapshot("main")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := local.ReadFile("apps/a.yaml"); err != nil || string(got) != "a: 1\n" {
		t.Fatalf("LocalSnapshot read %q, %v; want the fetched content", got, err)
	}
	if empty, err := repo.LocalSnapshot("never-fetched"); err != nil || empty.Exists() {
		t.Fatalf("LocalSnapshot of an unknown branch = %+v, %v", empty, err)
	}

	res, err := repo.Update(ctx(t), gitsync.UpdateRequest{Branch: "main"}, func(base *gitsync.Snapshot) (*gitsync.Change, error) {
		return &gitsync.Change{Message: "edit", Files: map[string][]byte{
			"apps/a.yaml":     []byte("a: 2\n"),
			"apps/sub/b.yaml": []byte("b: 1\n"),
			"README.md":       nil,
		}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if head, _ := srv.Head("app", "main"); head != res.Commit {
		t.Fatalf("server head %s, pushed %s", head, res.Commit)
	}
	if want := "README.md,apps/a.yaml,apps/sub/b.yaml"; strings.Join(res.Changed, ",") != want {
		t.Fatalf("Changed = %v, want %s", res.Changed, want)
	}
	if s, _ := srv.ReadFile("app", "main", "apps/sub/b.yaml"); s != "b: 1\n" {
		t.Fatalf("new file = %q", s)
	}
	if _, err := srv.ReadFile("app", "main", "README.md"); err == nil {
		t.Fatal("deleted file still present")
	}
	gitFsck(t, srv)

	// Writing the same content again makes no commit.
	again, err := repo.Update(ctx(t), gitsync.UpdateRequest{Branch: "main"}, func(*gitsync.Snapshot) (*gitsync.Change, error) {
		return &gitsync.Change{Message: "same", Files: map[string][]byte{"apps/a.yaml": []byte("a: 2\n")}}, nil
	})
	if err != nil || again.Commit != res.Commit || len(again.Changed) != 0 {
		t.Fatalf("no-op update = %+v, %v", again, err)
	}
}

func TestUpdateRetriesWhenAnotherPushWins(t *testing.T) {
	srv, repo := newRepo(t, map[string]string{"counter.txt": "0\n"})
	calls := 0
	res, err := repo.Update(ctx(t), gitsync.UpdateRequest{Branch: "main"}, func(base *gitsync.Snapshot) (*gitsync.Change, error) {
		calls++
		if calls == 1 {
			// Another user pushes after our fetch and before our push.
			if _, err := srv.Commit("app", "main", "their change", map[string]string{"theirs.txt": "x\n"}); err != nil {
				return nil, err
			}
		}
		return &gitsync.Change{Message: "our change", Files: map[string][]byte{"ours.txt": []byte("y\n")}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 || res.Attempts != 2 {
		t.Fatalf("build called %d times, %d attempts; want 2 and 2", calls, res.Attempts)
	}
	for _, f := range []string{"theirs.txt", "ours.txt", "counter.txt"} {
		if _, err := srv.ReadFile("app", "main", f); err != nil {
			t.Errorf("%s lost: %v", f, err)
		}
	}
	if log := gitLog(t, srv, "main"); strings.Join(log, "|") != "our change|their change|Initial commit" {
		t.Fatalf("history = %v", log)
	}
	gitFsck(t, srv)
}

func TestUpdateGivesUpAfterBoundedAttempts(t *testing.T) {
	srv, repo := newRepo(t, map[string]string{"a.txt": "0\n"})
	n := 0
	_, err := repo.Update(ctx(t), gitsync.UpdateRequest{Branch: "main"}, func(*gitsync.Snapshot) (*gitsync.Change, error) {
		n++
		if _, err := srv.Commit("app", "main", "race", map[string]string{"a.txt": string(rune('a'+n)) + "\n"}); err != nil {
			return nil, err
		}
		return &gitsync.Change{Message: "ours", Files: map[string][]byte{"b.txt": []byte("b\n")}}, nil
	})
	if !errors.Is(err, gitsync.ErrNonFastForward) {
		t.Fatalf("err = %v, want ErrNonFastForward", err)
	}
	if n != gitsync.DefaultPushAttempts {
		t.Fatalf("attempts = %d, want %d", n, gitsync.DefaultPushAttempts)
	}
}

func TestOrphanBranchAndDelete(t *testing.T) {
	srv, repo := newRepo(t, map[string]string{"a.txt": "a\n"})
	_, err := repo.Update(ctx(t), gitsync.UpdateRequest{Branch: "side"}, func(*gitsync.Snapshot) (*gitsync.Change, error) {
		return &gitsync.Change{Files: map[string][]byte{"x": []byte("x")}}, nil
	})
	if !errors.Is(err, gitsync.ErrBranchNotFound) {
		t.Fatalf("missing branch without CreateOrphan: err = %v", err)
	}
	res, err := repo.Update(ctx(t), gitsync.UpdateRequest{Branch: "side", CreateOrphan: true}, func(base *gitsync.Snapshot) (*gitsync.Change, error) {
		if base.Exists() {
			t.Error("base of an orphan branch exists")
		}
		return &gitsync.Change{Message: "orphan", Files: map[string][]byte{"x/y.txt": []byte("y\n")}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if log := gitLog(t, srv, "side"); len(log) != 1 || log[0] != "orphan" {
		t.Fatalf("orphan history = %v", log)
	}
	if _, err := srv.ReadFile("app", "side", "a.txt"); err == nil {
		t.Fatal("orphan branch has main's files")
	}
	branches, err := repo.Branches(ctx(t), "si")
	if err != nil || branches["side"] != res.Commit || len(branches) != 1 {
		t.Fatalf("Branches = %v, %v", branches, err)
	}
	if err := repo.DeleteBranches(ctx(t), "side"); err != nil {
		t.Fatal(err)
	}
	if h, _ := srv.Head("app", "side"); h != "" {
		t.Fatalf("side still at %s", h)
	}
}

// TestStorageModes writes through full-history, on-disk and constantly
// reset in-memory copies while another user keeps pushing.
func TestStorageModes(t *testing.T) {
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"a.txt": "a\n"})
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range []gitsync.Options{{URL: url, Depth: -1}, {URL: url, Dir: t.TempDir()}, {URL: url, MaxCachedObjects: 1}} {
		repo := openRepo(t, opts)
		for i := range 3 {
			if _, err := srv.Commit("app", "main", "theirs", map[string]string{"t.txt": string(rune('0' + i))}); err != nil {
				t.Fatal(err)
			}
			_, err := repo.Update(ctx(t), gitsync.UpdateRequest{Branch: "main"}, func(*gitsync.Snapshot) (*gitsync.Change, error) {
				return &gitsync.Change{Message: "ours", Files: map[string][]byte{"o.txt": []byte{byte('0' + i)}}}, nil
			})
			if err != nil {
				t.Fatalf("%+v: %v", opts, err)
			}
		}
	}
	gitFsck(t, srv)
}

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(ctx(t))
	t.Cleanup(cancel)
	return c, cancel
}

// gitLogBody returns the full message of the head commit of branch.
func gitLogBody(t *testing.T, srv *gitserver.Server, branch string) (string, error) {
	t.Helper()
	out, err := exec.Command("git", "-C", srv.Root+"/app.git", "log", "-1", "--format=%B", branch).CombinedOutput()
	return string(out), err
}

// TestTreeOrder writes names that sort differently as files and as
// directories; git fsck --strict rejects a wrongly ordered tree.
func TestTreeOrder(t *testing.T) {
	srv, repo := newRepo(t, map[string]string{"a/x": "x\n"})
	_, err := repo.Update(ctx(t), gitsync.UpdateRequest{Branch: "main"}, func(*gitsync.Snapshot) (*gitsync.Change, error) {
		return &gitsync.Change{Message: "order", Files: map[string][]byte{
			"a.b": []byte("1"), "a-b/c": []byte("2"), "a/y": []byte("3"), "a0": []byte("4"), "A": []byte("5"), "a/z/deep/file": []byte("6"),
		}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	gitFsck(t, srv)
	snap, err := repo.Snapshot(ctx(t), "main")
	if err != nil {
		t.Fatal(err)
	}
	files, err := snap.Files("a")
	if err != nil || strings.Join(files, ",") != "a/x,a/y,a/z/deep/file" {
		t.Fatalf("Files(a) = %v, %v", files, err)
	}
}
