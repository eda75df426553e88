// Package proc runs the child processes of the test platform and the demo
// (the Flux controllers, the rollgate controller): each in its own process
// group with its output in a log file, stopped by its pid (never by name),
// SIGTERM first. It also finds free loopback ports for them.
package proc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// FreePorts returns n distinct ports that were free on 127.0.0.1, all held
// open together and then released for the children to bind.
//
// They are picked at random below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999 by default), where the kernel
// never puts the local end of an outgoing connection: a port from the
// ephemeral range (what listening on port 0 gives) can be taken by any
// connection the machine opens between its release and the child's bind,
// which happened with several clusters starting at once ("bind: address
// already in use" from etcd).
func FreePorts(n int) ([]int, error) {
	low := ephemeralLow()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("no %d free ports on 127.0.0.1 between %d and %d", n, portsFrom, low)
		}
		port := portsFrom + rand.IntN(low-portsFrom)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		defer ln.Close()
		ports = append(ports, port)
	}
	return ports, nil
}

// portsFrom is the lowest port FreePorts hands out: above the well-known
// and most registered service ports.
const portsFrom = 20000

// ephemeralLow is the first port of the kernel's ephemeral range, or 32768
// where it cannot be read.
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low <= portsFrom+1000 {
		return 32768
	}
	return low
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
