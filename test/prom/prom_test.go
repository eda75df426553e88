package prom_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rollgate/rollgate/test/prom"
)

func TestScrapesAndAnswersQueries(t *testing.T) {
	var requests atomic.Int64
	metrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := requests.Add(1)
		fmt.Fprintf(w, "# TYPE rollgate_test_requests_total counter\nrollgate_test_requests_total{code=\"200\"} %d\n", 40+n)
	}))
	defer metrics.Close()

	var pid int
	t.Run("prometheus", func(t *testing.T) {
		start := time.Now()
		srv := prom.Start(t, prom.Options{
			Targets:        []string{strings.TrimPrefix(metrics.URL, "http://")},
			ScrapeInterval: 500 * time.Millisecond,
		})
		pid = srv.PID()
		t.Logf("prometheus ready in %v at %s", time.Since(start), srv.URL)

		client, err := promapi.NewClient(promapi.Config{Address: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		api := promv1.NewAPI(client)
		start = time.Now()
		var last model.Value
		err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			v, _, err := api.Query(ctx, `rollgate_test_requests_total{job="rollgate",code="200"}`, time.Now())
			if err != nil {
				return false, nil // not scraped yet, or a transient error
			}
			last = v
			vec, ok := v.(model.Vector)
			return ok && len(vec) == 1 && vec[0].Value > 40, nil
		})
		if err != nil {
			t.Fatalf("the scraped counter never appeared: %v (last result %v)", err, last)
		}
		t.Logf("first sample queryable %v after start: %v", time.Since(start), last)

		// The counter keeps being scraped: rate() over it is computable.
		err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			v, _, err := api.Query(ctx, `rate(rollgate_test_requests_total[5s])`, time.Now())
			vec, ok := v.(model.Vector)
			return err == nil && ok && len(vec) == 1 && vec[0].Value > 0, nil
		})
		if err != nil {
			t.Fatalf("rate() of the counter never became positive: %v", err)
		}
	})

	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("prometheus (pid %d) still running after cleanup", pid)
	}
}
