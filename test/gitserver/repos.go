package gitserver

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// ErrConflict is wrapped by Merge when the branches do not merge cleanly.
var ErrConflict = errors.New("merge conflict")

// Author is the identity of the server-side commits (CreateRepo, Commit,
// Merge): "another user" from the controller's point of view.
const (
	AuthorName  = "Rollgate Test User"
	AuthorEmail = "test-user@rollgate.invalid"
)

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$`)

// CreateRepo creates the bare repository <name>.git holding one commit on
// branch "main" (the default branch) with files (path -> content), and returns
// its clone URL, s.URL + "/" + name + ".git".
func (s *Server) CreateRepo(name string, files map[string]string) (string, error) {
	name = strings.TrimSuffix(name, ".git")
	if !validName.MatchString(name) || strings.Contains(name, "..") {
		return "", fmt.Errorf("invalid repository name %q", name)
	}
	dir := filepath.Join(s.Root, name+".git")
	if _, err := os.Stat(dir); err == nil {
		return "", fmt.Errorf("repository %q: %w", name, fs.ErrExist)
	}
	if _, err := git("", nil, "init", "--quiet", "--bare", "--initial-branch=main", dir); err != nil {
		return "", err
	}
	if _, err := s.Commit(name, "main", "Initial commit", files); err != nil {
		return "", err
	}
	return s.URL + "/" + name + ".git", nil
}

// Head returns the commit hash of refs/heads/<branch> in repo, or "" when the
// branch does not exist.
func (s *Server) Head(repo, branch string) (string, error) {
	dir, err := s.repoDir(repo)
	if err != nil {
		return "", err
	}
	return resolve(dir, "refs/heads/"+branch)
}

// ReadFile returns the content of path at the tip of branch (`git show
// branch:path`). A missing branch or path gives an error wrapping
// fs.ErrNotExist.
func (s *Server) ReadFile(repo, branch, path string) (string, error) {
	dir, err := s.repoDir(repo)
	if err != nil {
		return "", err
	}
	obj := "refs/heads/" + branch + ":" + strings.TrimPrefix(path, "/")
	if _, err := git(dir, nil, "cat-file", "-e", obj); err != nil {
		return "", fmt.Errorf("%s %s:%s: %w", repo, branch, path, fs.ErrNotExist)
	}
	return gitRaw(dir, nil, "cat-file", "blob", obj)
}

// Commit adds one commit to branch writing files (path -> content; other
// files are kept), as if another user had pushed it, and returns its hash. A
// missing branch is created from the tip of the default branch (an orphan
// commit when the repository is empty).
func (s *Server) Commit(repo, branch, message string, files map[string]string) (string, error) {
	dir, err := s.repoDir(repo)
	if err != nil {
		return "", err
	}
	parent, err := resolve(dir, "refs/heads/"+branch)
	if err != nil {
		return "", err
	}
	base := parent
	if base == "" {
		if base, err = resolve(dir, "HEAD"); err != nil {
			return "", err
		}
	}
	tree, err := writeTree(dir, base, files)
	if err != nil {
		return "", err
	}
	args := []string{"commit-tree", tree, "-m", message}
	if base != "" {
		args = append(args, "-p", base)
	}
	commit, err := git(dir, nil, args...)
	if err != nil {
		return "", err
	}
	// The old value makes the update atomic against concurrent pushes; ""
	// requires that the branch still does not exist.
	if _, err := git(dir, nil, "update-ref", "-m", "gitserver: commit", "refs/heads/"+branch, commit, parent); err != nil {
		return "", err
	}
	return commit, nil
}

// Merge merges branch from into branch into the way a pull request is merged:
// a fast-forward when into has not moved since from branched off, otherwise a
// merge commit with message. It returns the new tip of into (unchanged when
// from is already merged) and an error wrapping ErrConflict when the
// branches conflict.
func (s *Server) Merge(repo, into, from, message string) (string, error) {
	return s.merge(repo, into, from, message, nil)
}

// MergeAs is Merge with a merge commit authored by name <email>, as a
// forge records the user who merged a pull request.
func (s *Server) MergeAs(repo, into, from, message, name, email string) (string, error) {
	return s.merge(repo, into, from, message, []string{"GIT_AUTHOR_NAME=" + name, "GIT_AUTHOR_EMAIL=" + email})
}

func (s *Server) merge(repo, into, from, message string, env []string) (string, error) {
	dir, err := s.repoDir(repo)
	if err != nil {
		return "", err
	}
	intoHash, err := mustResolve(dir, into)
	if err != nil {
		return "", err
	}
	fromHash, err := mustResolve(dir, from)
	if err != nil {
		return "", err
	}
	if isAncestor(dir, fromHash, intoHash) {
		return intoHash, nil
	}
	ref := "refs/heads/" + into
	if isAncestor(dir, intoHash, fromHash) {
		if _, err := git(dir, nil, "update-ref", "-m", "gitserver: fast-forward", ref, fromHash, intoHash); err != nil {
			return "", err
		}
		return fromHash, nil
	}
	out, err := git(dir, nil, "merge-tree", "--write-tree", "--name-only", intoHash, fromHash)
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) && exitErr.ExitCode() == 1 {
			return "", fmt.Errorf("merge %s into %s in %s: %w: %s", from, into, repo, ErrConflict, out)
		}
		return "", err
	}
	tree, _, _ := strings.Cut(out, "\n")
	commit, err := git(dir, env, "commit-tree", tree, "-p", intoHash, "-p", fromHash, "-m", message)
	if err != nil {
		return "", err
	}
	if _, err := git(dir, nil, "update-ref", "-m", "gitserver: merge", ref, commit, intoHash); err != nil {
		return "", err
	}
	return commit, nil
}

// repoDir returns the folder of an existing repository (name with or without
// ".git").
func (s *Server) repoDir(repo string) (string, error) {
	repo = strings.TrimSuffix(repo, ".git")
	if !validName.MatchString(repo) || strings.Contains(repo, "..") {
		return "", fmt.Errorf("invalid repository name %q", repo)
	}
	dir := filepath.Join(s.Root, repo+".git")
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err != nil {
		return "", fmt.Errorf("repository %q: %w", repo, fs.ErrNotExist)
	}
	return dir, nil
}

// writeTree writes a tree holding base's files overlaid with files, using a
// throwaway index and work tree so the bare repository is never checked out.
func writeTree(dir, base string, files map[string]string) (string, error) {
	tmp, err := os.MkdirTemp("", "gitserver-tree-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	work := filepath.Join(tmp, "work")
	env := []string{"GIT_INDEX_FILE=" + filepath.Join(tmp, "index"), "GIT_WORK_TREE=" + work}
	if base != "" {
		if _, err := git(dir, env, "read-tree", base); err != nil {
			return "", err
		}
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for i, p := range paths {
		clean := filepath.Clean(filepath.FromSlash(strings.TrimPrefix(p, "/")))
		if clean == "." || strings.HasPrefix(clean, "..") {
			return "", fmt.Errorf("invalid file path %q", p)
		}
		full := filepath.Join(work, clean)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(full, []byte(files[p]), 0o644); err != nil {
			return "", err
		}
		paths[i] = filepath.ToSlash(clean)
	}
	if len(paths) > 0 {
		args := append([]string{"add", "--force", "--"}, paths...)
		if _, err := git(dir, env, args...); err != nil {
			return "", err
		}
	}
	return git(dir, env, "write-tree")
}

func resolve(dir, rev string) (string, error) {
	out, err := git(dir, nil, "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) && exitErr.ExitCode() == 1 {
			return "", nil
		}
		return "", err
	}
	return out, nil
}

func mustResolve(dir, branch string) (string, error) {
	h, err := resolve(dir, "refs/heads/"+branch)
	if err == nil && h == "" {
		err = fmt.Errorf("branch %q: %w", branch, fs.ErrNotExist)
	}
	return h, err
}

func isAncestor(dir, ancestor, of string) bool {
	_, err := git(dir, nil, "merge-base", "--is-ancestor", ancestor, of)
	return err == nil
}

// git runs git in dir (a bare repository, or "" for none) and returns its
// trimmed standard output.
func git(dir string, env []string, args ...string) (string, error) {
	out, err := gitRaw(dir, env, args...)
	return strings.TrimSpace(out), err
}

func gitRaw(dir string, env []string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Env = append(append(hostEnv(), gitEnv()...), env...)
	if dir != "" {
		cmd.Env = append(cmd.Env, "GIT_DIR="+dir)
		cmd.Dir = dir
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// gitEnv makes git independent of the machine's configuration and gives
// commits a fixed identity.
func gitEnv() []string {
	return []string{
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + os.DevNull,
		"GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=" + AuthorName,
		"GIT_AUTHOR_EMAIL=" + AuthorEmail,
		"GIT_COMMITTER_NAME=" + AuthorName,
		"GIT_COMMITTER_EMAIL=" + AuthorEmail,
	}
}

// hostEnv is the process environment without GIT_* variables, which would
// point git at another repository.
func hostEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			env = append(env, kv)
		}
	}
	return env
}
