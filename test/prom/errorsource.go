package prom

import (
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ErrorSource is an application as Prometheus sees it: it serves the
// counter http_requests_total{code="200"|"500"}, which a goroutine
// increments by 100 requests every 100 ms, a settable share of them errors.
// Scrape Addr to give an analysis an error rate the test controls.
type ErrorSource struct {
	// Addr is the host:port of the metrics endpoint.
	Addr    string
	percent atomic.Int32
}

// SetErrorPercent sets the share of requests that fail from now on.
func (s *ErrorSource) SetErrorPercent(p int32) { s.percent.Store(p) }

// StartErrorSource serves the counters and counts requests until the test
// ends.
func StartErrorSource(t testing.TB) *ErrorSource {
	t.Helper()
	reg := prometheus.NewRegistry()
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "http_requests_total", Help: "Requests served by the application, by status code.",
	}, []string{"code"})
	reg.MustRegister(reqs)
	ok, failed := reqs.WithLabelValues("200"), reqs.WithLabelValues("500")
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s := &ErrorSource{Addr: strings.TrimPrefix(srv.URL, "http://")}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			p := float64(s.percent.Load())
			failed.Add(p)
			ok.Add(100 - p)
		}
	}()
	t.Cleanup(func() { close(stop); <-done; srv.Close() })
	return s
}
