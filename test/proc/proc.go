// Package proc runs the child processes of the test platform and the demo
// (the Flux controllers, the rollgate controller): each in its own process
// group with its output in a log file, stopped by its pid (never by name),
// SIGTERM first. It also finds free loopback ports for them.
package proc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Process is one running child.
type Process struct {
	// Name of the child, used in errors and as its log file's name.
	Name string
	// Log is the file holding its stdout and stderr.
	Log string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts bin with args and extra environment variables (added to this
// process's environment), writing its output to dir/<name>.log.
func Start(dir, name, bin string, args, env []string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = processAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Exited returns an error, with the end of its log, when the process is no
// longer running.
func (p *Process) Exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited unexpectedly (%v); last lines of %s:\n%s", p.Name, p.err, p.Log, Tail(p.Log, 15))
	default:
		return nil
	}
}

// Stop sends SIGTERM to the process group, waits up to grace, then sends
// SIGKILL.
func (p *Process) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	pgid := p.cmd.Process.Pid // Setpgid: the group id is the pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s (pid %d) still running after SIGKILL", p.Name, pgid)
	}
}

// StopAll stops processes in reverse start order, each with grace.
func StopAll(procs []*Process, grace time.Duration) error {
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		errs = append(errs, procs[i].Stop(grace))
	}
	return errors.Join(errs...)
}

// Tail returns the last n lines of a file.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Listening reports whether something accepts connections on addr.
func Listening(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// Pid is the child's process id (and process group id).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the child has exited.
func (p *Process) Done() <-chan struct{} { return p.done }
