package gitserver

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
)

// SignFunc returns an armored detached signature of a commit's content
// (what `git commit -S` asks gpg for).
type SignFunc func(payload []byte) ([]byte, error)

// unsigned drops the gpgsig header (and its continuation lines) of a raw
// commit, so that a signed tip can be signed again by someone else.
func unsigned(raw string) string {
	headers, message, _ := strings.Cut(raw, "\n\n")
	var kept []string
	inSig := false
	for _, l := range strings.Split(headers, "\n") {
		switch {
		case strings.HasPrefix(l, "gpgsig "):
			inSig = true
		case inSig && strings.HasPrefix(l, " "):
		default:
			inSig = false
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n") + "\n\n" + message
}

// SignTip replaces the tip of branch with a signed copy of it (same tree,
// parents, author and message), as if its author had signed it, and
// returns the new tip (a signed tip loses its signature first). sign may write anything, including an SSH
// signature block, to test verifiers with.
func (s *Server) SignTip(repo, branch string, sign SignFunc) (string, error) {
	dir, err := s.repoDir(repo)
	if err != nil {
		return "", err
	}
	tip, err := mustResolve(dir, branch)
	if err != nil {
		return "", err
	}
	raw, err := gitRaw(dir, nil, "cat-file", "commit", tip)
	if err != nil {
		return "", err
	}
	payload := unsigned(raw)
	sig, err := sign([]byte(payload))
	if err != nil {
		return "", fmt.Errorf("signing %s: %w", tip, err)
	}
	headers, message, ok := strings.Cut(payload, "\n\n")
	if !ok {
		return "", fmt.Errorf("commit %s has no message", tip)
	}
	lines := strings.Split(strings.TrimRight(string(sig), "\n"), "\n")
	signed := headers + "\ngpgsig " + strings.Join(lines, "\n ") + "\n\n" + message
	cmd := exec.Command("git", "hash-object", "-t", "commit", "-w", "--stdin")
	cmd.Env = append(append(hostEnv(), gitEnv()...), "GIT_DIR="+dir)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(signed)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git hash-object: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	commit := strings.TrimSpace(out.String())
	if _, err := git(dir, nil, "update-ref", "-m", "gitserver: sign", "refs/heads/"+branch, commit, tip); err != nil {
		return "", err
	}
	return commit, nil
}
