package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/cmd/internal/dashboard"
	"github.com/rollgate/rollgate/cmd/internal/kubeconfig"
)

// dashboardFlags are the flags of `rollgate dashboard`.
type dashboardFlags struct {
	cluster clusterFlags
	git     gitFlags
	all     bool
	listen  string
	refresh time.Duration
	since   time.Duration
}

func newDashboardCommand() *cobra.Command {
	f := &dashboardFlags{}
	cmd := &cobra.Command{
		Use:   "dashboard [--repo <url>]",
		Short: "Serve a read-only web page of Rollouts: step, gate, traffic, analysis, and past releases from Git",
		Long: `Serve a read-only web page, and its JSON at /api/rollouts, showing every
Rollout with its step and state, the gate it waits at with its pull request
or approval branch, the traffic share of each version, analysis results and
conditions.

Without --repo the page reads the cluster with your kubeconfig's credentials
(get and list only: it never writes), in -n's namespace or, with -A, every
namespace; a Rollout your user may not read is answered 403. With --repo it
reads the Git status branch alone and adds each Rollout's past releases.

The page listens on 127.0.0.1 by default and has no login of its own: anyone
who reaches --listen sees what your credentials can read.

Exit codes: 0 stopped by a signal, 1 error, 2 bad usage.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, what, err := f.handler()
			if err != nil {
				return err
			}
			return serveDashboard(cmd.Context(), cmd, f.listen, h, what)
		},
	}
	fs := cmd.Flags()
	f.cluster.register(fs)
	f.git.register(fs)
	fs.BoolVarP(&f.all, "all-namespaces", "A", false, "Show Rollouts of every namespace")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8090", "Address to serve the page on")
	fs.DurationVar(&f.refresh, "refresh", 5*time.Second, "Reload the page this often; 0 never")
	fs.DurationVar(&f.since, "since", 720*time.Hour, "With --repo: read the release history back this long; 0 reads the whole branch")
	return cmd
}

// handler builds the page's handler from the flags, and says what it shows.
func (f *dashboardFlags) handler() (http.Handler, string, error) {
	if f.refresh < 0 || f.since < 0 {
		return nil, "", usageError{errors.New("--refresh and --since must not be negative")}
	}
	host, _, err := net.SplitHostPort(f.listen)
	if err != nil {
		return nil, "", usageError{fmt.Errorf("--listen %q: %w", f.listen, err)}
	}
	ip := net.ParseIP(host)
	o := dashboard.Options{Refresh: f.refresh, Timeout: f.git.timeout,
		LoopbackOnly: host == "localhost" || (ip != nil && ip.IsLoopback())}
	if f.git.repo != "" {
		status, err := f.git.open()
		if err != nil {
			return nil, "", err
		}
		history, err := f.git.open()
		if err != nil {
			return nil, "", err
		}
		o.Namespace = f.cluster.namespace
		o.Source = dashboard.GitSource{Status: status, History: history, URL: f.git.repo, Branch: f.git.statusBranch, Prefix: f.git.pathPrefix, Since: f.since,
			Cache: &dashboard.GitCache{MaxAge: time.Minute}}
	} else {
		c, ns, err := f.cluster.client()
		if err != nil {
			return nil, "", err
		}
		if f.all {
			ns = ""
		}
		o.Namespace = ns
		server := ""
		if cfg, err := kubeconfig.Loader(f.cluster.kubeconfig, f.cluster.context).ClientConfig(); err == nil {
			server = cfg.Host
		}
		// Only the reading half of the client reaches the page.
		o.Source = dashboard.ClusterSource{Reader: client.Reader(c), Cluster: server}
	}
	return dashboard.Handler(o), o.Source.Describe(), nil
}

// serveDashboard serves h on addr until ctx ends.
func serveDashboard(ctx context.Context, cmd *cobra.Command, addr string, h http.Handler, what string) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(cmd.OutOrStdout(), "rollgate dashboard: http://%s/ shows %s (read-only; Ctrl-C stops)\n", l.Addr(), what)
	if tcp, ok := l.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s is not a loopback address: the page has no login, anyone reaching it sees what your credentials can read\n", l.Addr())
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
