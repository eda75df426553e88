// Package prom runs a real Prometheus server on loopback for tests and the
// demo, scraping the metrics endpoints a test serves, so that analysis
// queries run against the genuine PromQL engine and HTTP API.
//
// The binary is bin/prometheus (`make tools`; the Debian package), with a
// configuration and storage in a temporary folder.
package prom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/repo"
)

// Options configures a Server.
type Options struct {
	// Targets are the host:port endpoints to scrape (job "rollgate").
	Targets []string
	// MetricsPath is the path scraped on every target; "" means /metrics.
	MetricsPath string
	// ScrapeInterval is the scrape (and rule evaluation) interval; 0 means
	// 1 s.
	ScrapeInterval time.Duration
	// StartTimeout bounds the wait for /-/ready; 0 means 30 s.
	StartTimeout time.Duration
	// Host is the address Prometheus listens on; "" means 127.0.0.1. A
	// real node's pods reach the host on realnode.NodeIP.
	Host string
}

// Server is a running Prometheus.
type Server struct {
	// URL is the base URL of the HTTP API, http://<Options.Host>:<port>.
	URL string
	// Dir holds the configuration, the TSDB and prometheus.log.
	Dir string

	cmd    *exec.Cmd
	exited chan struct{}
	ownDir bool
}

// Start starts Prometheus for the length of a test and stops it on cleanup;
// it fails the test when Prometheus does not become ready.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := start(opts, t.TempDir(), false)
	if err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus log:\n%s", s.LogTail(20))
		}
		if err := s.Close(); err != nil {
			t.Errorf("stop prometheus: %v", err)
		}
	})
	return s
}

// New starts Prometheus outside a test (the demo); the caller must call
// Close.
func New(opts Options) (*Server, error) {
	dir, err := os.MkdirTemp("", "rollgate-prom-")
	if err != nil {
		return nil, err
	}
	s, err := start(opts, dir, true)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func start(opts Options, dir string, ownDir bool) (*Server, error) {
	if opts.MetricsPath == "" {
		opts.MetricsPath = "/metrics"
	}
	if opts.ScrapeInterval == 0 {
		opts.ScrapeInterval = time.Second
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 30 * time.Second
	}
	bin, err := repo.LookTool("prometheus")
	if err != nil {
		return nil, err
	}
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, []byte(configYAML(opts)), 0o644); err != nil {
		return nil, err
	}
	// The port is free when chosen but released before Prometheus binds it;
	// another process may win that race, so retry with a new port.
	var errs []error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := launch(bin, config, dir, opts.Host, opts.StartTimeout)
		if err == nil {
			s.ownDir = ownDir
			return s, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func launch(bin, config, dir, host string, timeout time.Duration) (*Server, error) {
	ports, err := proc.FreePorts(1)
	if err != nil {
		return nil, err
	}
	port := ports[0]
	if host == "" {
		host = "127.0.0.1"
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin,
		"--config.file="+config,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--web.enable-lifecycle",
		"--log.level=warn",
	)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own process group, and killed if the test process dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + addr, Dir: dir, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	if err := s.waitReady(timeout); err != nil {
		_ = s.stop()
		return nil, fmt.Errorf("%w\n%s", err, s.LogTail(10))
	}
	return s, nil
}

func (s *Server) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/-/ready", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("prometheus exited during start: %v", s.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("prometheus not ready at %s after %v", s.URL, timeout)
		case <-tick.C:
		}
	}
}

// PID returns the process id of Prometheus.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Close stops Prometheus (SIGTERM, SIGKILL after 10 s) and removes its folder
// when New created it.
func (s *Server) Close() error {
	err := s.stop()
	if s.ownDir {
		err = errors.Join(err, os.RemoveAll(s.Dir))
	}
	return err
}

func (s *Server) stop() error {
	pgid := s.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-s.exited:
		return nil
	case <-time.After(10 * time.Second):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-s.exited:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("prometheus (pid %d) still running after SIGKILL", pgid)
	}
}

// LogTail returns the last n lines of Prometheus' log.
func (s *Server) LogTail(n int) string {
	data, err := os.ReadFile(filepath.Join(s.Dir, "prometheus.log"))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func configYAML(opts Options) string {
	interval := promDuration(opts.ScrapeInterval)
	var b bytes.Buffer
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\n", interval, interval, interval)
	targets := make([]string, len(opts.Targets))
	for i, t := range opts.Targets {
		targets[i] = strconv.Quote(t)
	}
	fmt.Fprintf(&b, "scrape_configs:\n- job_name: rollgate\n  metrics_path: %q\n  static_configs:\n  - targets: [%s]\n",
		opts.MetricsPath, strings.Join(targets, ", "))
	return b.String()
}

// promDuration formats a duration as a Prometheus duration (whole milliseconds).
func promDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}
