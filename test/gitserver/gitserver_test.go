package gitserver_test

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"

	"github.com/rollgate/rollgate/test/gitserver"
)

func TestCloneCommitPushWithBasicAuth(t *testing.T) {
	start := time.Now()
	srv := gitserver.Start(t, gitserver.Options{Username: "bot", Password: "s3cret"})
	t.Logf("git server up in %v at %s", time.Since(start), srv.URL)

	url, err := srv.CreateRepo("apps", map[string]string{"apps/web/deployment.yaml": "image: web:v1\n"})
	if err != nil {
		t.Fatal(err)
	}
	if want := srv.URL + "/apps.git"; url != want {
		t.Fatalf("clone URL = %q, want %q", url, want)
	}
	auth := &githttp.BasicAuth{Username: "bot", Password: "s3cret"}

	dir := t.TempDir()
	repo, err := git.PlainClone(dir, false, &git.CloneOptions{URL: url, Auth: auth, ReferenceName: plumbing.NewBranchReferenceName("main")})
	if err != nil {
		t.Fatalf("clone: %v", err)
	}
	if got := readWorktree(t, dir, "apps/web/deployment.yaml"); got != "image: web:v1\n" {
		t.Fatalf("cloned file = %q", got)
	}

	hash := commitFile(t, repo, dir, "apps/web/deployment.yaml", "image: web:v2\n")
	if err := repo.Push(&git.PushOptions{Auth: auth}); err != nil {
		t.Fatalf("push: %v", err)
	}

	head, err := srv.Head("apps", "main")
	if err != nil || head != hash.String() {
		t.Fatalf("Head = %q, %v; want the pushed commit %s", head, err, hash)
	}
	content, err := srv.ReadFile("apps", "main", "apps/web/deployment.yaml")
	if err != nil || content != "image: web:v2\n" {
		t.Fatalf("ReadFile = %q, %v; want the pushed content", content, err)
	}

	// A wrong password is refused for both fetch and push.
	bad := &githttp.BasicAuth{Username: "bot", Password: "wrong"}
	commitFile(t, repo, dir, "apps/web/deployment.yaml", "image: web:v3\n")
	if err := repo.Push(&git.PushOptions{Auth: bad}); !errors.Is(err, transport.ErrAuthenticationRequired) {
		t.Fatalf("push with a wrong password: err = %v, want %v", err, transport.ErrAuthenticationRequired)
	}
	if _, err := git.PlainClone(t.TempDir(), false, &git.CloneOptions{URL: url}); !errors.Is(err, transport.ErrAuthenticationRequired) {
		t.Fatalf("anonymous clone: err = %v, want %v", err, transport.ErrAuthenticationRequired)
	}
	if after, _ := srv.Head("apps", "main"); after != hash.String() {
		t.Fatalf("refused push moved main to %s", after)
	}
}

func TestServerSideCommitAndMerge(t *testing.T) {
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("fleet/apps", map[string]string{"a.txt": "a1\n", "b.txt": "b1\n"})
	if err != nil {
		t.Fatal(err)
	}

	// A new branch starts from main and keeps main's files.
	approve, err := srv.Commit("fleet/apps", "approve", "Approve batch 2", map[string]string{"approved.txt": "yes\n"})
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, srv, "fleet/apps", "approve", "a.txt", "a1\n")
	mustRead(t, srv, "fleet/apps", "approve", "approved.txt", "yes\n")
	if _, err := srv.ReadFile("fleet/apps", "main", "approved.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadFile of a file only on another branch: err = %v, want fs.ErrNotExist", err)
	}

	// Fast-forward merge.
	got, err := srv.Merge("fleet/apps", "main", "approve", "Merge approve")
	if err != nil || got != approve {
		t.Fatalf("fast-forward Merge = %q, %v; want %s", got, err, approve)
	}
	// Merging again changes nothing.
	if got, err := srv.Merge("fleet/apps", "main", "approve", "again"); err != nil || got != approve {
		t.Fatalf("repeated Merge = %q, %v; want %s", got, err, approve)
	}

	// Diverged branches give a merge commit with both changes.
	if _, err := srv.Commit("fleet/apps", "feature", "Edit b", map[string]string{"b.txt": "b2\n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Commit("fleet/apps", "main", "Edit a", map[string]string{"a.txt": "a2\n"}); err != nil {
		t.Fatal(err)
	}
	merged, err := srv.Merge("fleet/apps", "main", "feature", "Merge feature")
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, srv, "fleet/apps", "main", "a.txt", "a2\n")
	mustRead(t, srv, "fleet/apps", "main", "b.txt", "b2\n")

	// The merge is visible to clients.
	repo, err := git.PlainClone(t.TempDir(), false, &git.CloneOptions{URL: url})
	if err != nil {
		t.Fatalf("clone: %v", err)
	}
	head, err := repo.Head()
	if err != nil {
		t.Fatal(err)
	}
	c, err := repo.CommitObject(head.Hash())
	if err != nil || head.Hash().String() != merged || c.NumParents() != 2 || strings.TrimSpace(c.Message) != "Merge feature" {
		t.Fatalf("cloned HEAD = %s (%v): want the merge commit %s with 2 parents", head.Hash(), err, merged)
	}

	// Conflicting edits are refused and leave the branch alone.
	if _, err := srv.Commit("fleet/apps", "clash", "a4", map[string]string{"a.txt": "a4\n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Commit("fleet/apps", "main", "a3", map[string]string{"a.txt": "a3\n"}); err != nil {
		t.Fatal(err)
	}
	before, _ := srv.Head("fleet/apps", "main")
	if _, err := srv.Merge("fleet/apps", "main", "clash", "Merge clash"); !errors.Is(err, gitserver.ErrConflict) {
		t.Fatalf("conflicting Merge: err = %v, want ErrConflict", err)
	}
	if after, _ := srv.Head("fleet/apps", "main"); after != before {
		t.Fatalf("failed merge moved main from %s to %s", before, after)
	}

	if h, err := srv.Head("fleet/apps", "nope"); err != nil || h != "" {
		t.Fatalf("Head of a missing branch = %q, %v; want \"\", nil", h, err)
	}
	if _, err := srv.Head("missing", "main"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Head of a missing repository: err = %v, want fs.ErrNotExist", err)
	}
}

// TestGitCLIChunkedPush pushes with the git CLI and a tiny post buffer, which
// makes it send a chunked request body (net/http/cgi alone refuses those).
func TestGitCLIChunkedPush(t *testing.T) {
	srv := gitserver.Start(t, gitserver.Options{Username: "u", Password: "p"})
	url, err := srv.CreateRepo("cli", map[string]string{"README.md": "hi\n"})
	if err != nil {
		t.Fatal(err)
	}
	authURL := strings.Replace(url, "http://", "http://u:p@", 1)
	dir := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_TERMINAL_PROMPT=0",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run("clone", "--quiet", authURL, ".")
	big := strings.Repeat("some incompressible-ish line 0123456789 abcdefghij\n", 2000)
	for i := 0; i < 5; i++ {
		big += strings.Repeat(string(rune('a'+i)), 1000) + time.Now().String() + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "big.txt"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	run("add", "big.txt")
	run("commit", "--quiet", "-m", "big")
	run("-c", "http.postBuffer=1024", "push", "--quiet", "origin", "HEAD:main")
	mustRead(t, srv, "cli", "main", "big.txt", big)
}

func commitFile(t *testing.T, repo *git.Repository, dir, path, content string) plumbing.Hash {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, path), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wt.Add(path); err != nil {
		t.Fatal(err)
	}
	sig := &object.Signature{Name: "rollgate", Email: "rollgate@example.invalid", When: time.Now()}
	hash, err := wt.Commit("update "+path, &git.CommitOptions{Author: sig, Committer: sig})
	if err != nil {
		t.Fatal(err)
	}
	return hash
}

func readWorktree(t *testing.T, dir, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustRead(t *testing.T, srv *gitserver.Server, repo, branch, path, want string) {
	t.Helper()
	got, err := srv.ReadFile(repo, branch, path)
	if err != nil || got != want {
		t.Fatalf("ReadFile(%s %s:%s) = %.60q, %v; want %.60q", repo, branch, path, got, err, want)
	}
}
