package realtraffic

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// answer is one request through the gateway.
type answer struct {
	at      time.Time
	version string // "v1", "v2"; empty when the request failed
	canary  bool   // sent with the canary header
	err     string
}

// load sends requests to url at rate per second from a few workers, and
// records every answer.
type load struct {
	mu      sync.Mutex
	answers []answer
	cancel  context.CancelFunc
	done    sync.WaitGroup
	// header is sent by a quarter of the workers (none when empty).
	header http.Header
}

func startLoad(url string, rate int, header http.Header) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel, header: header}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	const workers = 8
	interval := time.Second * workers / time.Duration(rate)
	for w := 0; w < workers; w++ {
		l.done.Add(1)
		go func(w int) {
			defer l.done.Done()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				// Every fourth worker sends the canary header (header-match
				// steps); the others never do.
				withHeader := header != nil && w%4 == 0
				l.record(do(ctx, client, url, header, withHeader))
			}
		}(w)
	}
	return l
}

func do(ctx context.Context, client *http.Client, url string, header http.Header, withHeader bool) answer {
	a := answer{canary: withHeader}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		a.err = err.Error()
		return a
	}
	if withHeader {
		for k, v := range header {
			req.Header[k] = v
		}
	}
	resp, err := client.Do(req)
	a.at = time.Now()
	if err != nil {
		if ctx.Err() != nil {
			a.err = "" // stopped
			a.version = "stopped"
			return a
		}
		a.err = err.Error()
		return a
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		a.err = fmt.Sprintf("%s %s", resp.Status, strings.TrimSpace(string(body)))
		return a
	}
	a.version, _, _ = strings.Cut(strings.TrimSpace(string(body)), " ")
	return a
}

func (l *load) record(a answer) {
	if a.version == "stopped" {
		return
	}
	l.mu.Lock()
	l.answers = append(l.answers, a)
	l.mu.Unlock()
}

func (l *load) stop() {
	l.cancel()
	l.done.Wait()
}

// mark is a position in the record.
func (l *load) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.answers)
}

// since returns the answers recorded after mark, waiting until there are at
// least n of them (or ctx ends).
func (l *load) since(ctx context.Context, mark, n int) []answer {
	for {
		l.mu.Lock()
		if len(l.answers)-mark >= n || ctx.Err() != nil {
			out := append([]answer(nil), l.answers[mark:]...)
			l.mu.Unlock()
			return out
		}
		l.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
}

// sinceCounts returns the answers recorded after mark, waiting until at
// least with of them were sent with the header and without without it (or
// ctx ends). A quarter of the workers send the header, but the share of
// the answers is not a quarter: a worker's ticker drops the ticks that
// pass while its request is still out, so the workers whose requests take
// longer (the header's go to the one canary pod) answer fewer on a loaded
// machine (22.5% in CI's run of dc833ac: 903 of 4,006 answers).
func (l *load) sinceCounts(ctx context.Context, mark, with, without int) []answer {
	for {
		l.mu.Lock()
		w, wo := 0, 0
		for _, a := range l.answers[mark:] {
			if a.canary {
				w++
			} else {
				wo++
			}
		}
		if (w >= with && wo >= without) || ctx.Err() != nil {
			out := append([]answer(nil), l.answers[mark:]...)
			l.mu.Unlock()
			return out
		}
		l.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
}

func (l *load) all() []answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]answer(nil), l.answers...)
}

// tally counts answers by version, without the header unless canary.
type tally struct {
	total, failed int
	byVersion     map[string]int
	errs          map[string]int
	rate          float64
}

func count(answers []answer, withHeader bool) tally {
	t := tally{byVersion: map[string]int{}, errs: map[string]int{}}
	var first, last time.Time
	for _, a := range answers {
		if a.canary != withHeader {
			continue
		}
		t.total++
		if a.err != "" {
			t.failed++
			t.errs[a.err]++
			continue
		}
		t.byVersion[a.version]++
		if first.IsZero() || a.at.Before(first) {
			first = a.at
		}
		if a.at.After(last) {
			last = a.at
		}
	}
	if d := last.Sub(first).Seconds(); d > 0 {
		t.rate = float64(t.total) / d
	}
	return t
}

// share is the percentage of answers given by version.
func (t tally) share(version string) float64 {
	ok := t.total - t.failed
	if ok == 0 {
		return 0
	}
	return 100 * float64(t.byVersion[version]) / float64(ok)
}

// burstsAt describes the failed requests as runs in time, at the wall
// clock in UTC (as the controller and Traefik log it).
func burstsAt(answers []answer) string {
	return bursts(answers, time.Time{})
}

// bursts describes the failed requests as runs in time, for a human: in
// seconds after since, or at the wall clock in UTC when since is zero.
func bursts(answers []answer, since time.Time) string {
	var b strings.Builder
	var first, last time.Time
	n := 0
	flush := func() {
		if n > 0 {
			if since.IsZero() {
				fmt.Fprintf(&b, "\n  %d failed between %s and %s", n, first.UTC().Format("15:04:05.000"), last.UTC().Format("15:04:05.000"))
			} else {
				fmt.Fprintf(&b, "\n  %d failed between +%.2fs and +%.2fs", n, first.Sub(since).Seconds(), last.Sub(since).Seconds())
			}
		}
	}
	for _, a := range answers {
		if a.err == "" {
			continue
		}
		if n > 0 && a.at.Sub(last) > time.Second {
			flush()
			n = 0
		}
		if n == 0 {
			first = a.at
		}
		last = a.at
		n++
	}
	flush()
	return b.String()
}

// wholeStory counts every answer l recorded, logs them under name ("whole
// story", or a route's name), fails the test when a request failed,
// saying when, and returns the tally.
func wholeStory(t *testing.T, name string, l *load) tally {
	t.Helper()
	all := count(l.all(), false)
	t.Logf("%s: %d requests, %d failed, by version %v", name, all.total, all.failed, all.byVersion)
	if all.failed > 0 {
		t.Errorf("%s: %d of %d requests failed: %v\nwhen (UTC, to read beside the controller's log):%s",
			name, all.failed, all.total, topErrors(all.errs), burstsAt(l.all()))
	}
	return all
}
