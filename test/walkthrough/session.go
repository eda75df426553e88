// Package walkthrough runs a documentation page as a test: every shell block
// of the page, in order, in one bash session, against a real (kwok) cluster,
// a Git server and Flux's controllers. A block the test machine cannot run as
// written (it needs the internet or a container runtime) carries an HTML
// comment naming what the test does instead (see package docpage for the
// directives), so the page states its own deviations and nothing is skipped
// silently.
package walkthrough

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// doneMarker ends the output of every block; it is printed by the session,
// not by the page.
const doneMarker = "__walkthrough_block_done__"

// Session is one bash process that runs blocks in order, so that variables,
// the working directory and exported values carry from one block to the
// next, as in a reader's terminal. It runs with `set -euo pipefail`: the
// first failing command ends the session and fails the block.
type Session struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	dir    string
	n      int
	mu     sync.Mutex
	waited error
	exited chan struct{}
}

// StartSession starts bash in dir with env (the whole environment) and a
// scratch folder for block files.
func StartSession(dir string, env []string) (*Session, error) {
	scratch, err := os.MkdirTemp("", "walkthrough-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("bash", "--noprofile", "--norc")
	cmd.Dir = dir
	cmd.Env = env
	// Its own process group, so Close also stops a command still running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start bash: %w", err)
	}
	s := &Session{cmd: cmd, stdin: stdin, lines: make(chan string, 1024), dir: scratch, exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.waited = err
		s.mu.Unlock()
		pw.Close()
		close(s.exited)
	}()
	if _, err := io.WriteString(stdin, "set -euo pipefail\n"); err != nil {
		return nil, err
	}
	return s, nil
}

// Run runs script in the session and returns its output (stdout and stderr
// interleaved). It fails when a command fails (the session is then over),
// or when the script does not finish within timeout.
func (s *Session) Run(ctx context.Context, script string, timeout time.Duration) (string, error) {
	s.n++
	file := filepath.Join(s.dir, fmt.Sprintf("block-%02d.sh", s.n))
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		return "", err
	}
	// stdin of the block is /dev/null: a command waiting for input fails
	// instead of reading the session's own script.
	if _, err := fmt.Fprintf(s.stdin, "source %q </dev/null\necho %s\n", file, doneMarker); err != nil {
		return "", fmt.Errorf("the shell is gone: %w", err)
	}
	var out strings.Builder
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				<-s.exited
				s.mu.Lock()
				err := s.waited
				s.mu.Unlock()
				if err == nil {
					err = errors.New("the shell exited")
				}
				return out.String(), fmt.Errorf("a command failed: %w", err)
			}
			if line == doneMarker {
				return out.String(), nil
			}
			out.WriteString(line + "\n")
		case <-timer.C:
			return out.String(), fmt.Errorf("not finished after %s", timeout)
		case <-ctx.Done():
			return out.String(), ctx.Err()
		}
	}
}

// Close ends the shell and removes the block files.
func (s *Session) Close() error {
	s.stdin.Close()
	select {
	case <-s.exited:
	case <-time.After(2 * time.Second):
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
	return os.RemoveAll(s.dir)
}
