package analysis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rollgate/rollgate/strategy/verdict"
)

// measure takes the due measurements, at most r.Parallel at a time, and
// stores each job's judged measurement in job.meas.
func (r *Runner) measure(ctx context.Context, due []*job, now time.Time, writes *Writes) {
	if len(due) == 0 {
		return
	}
	secrets := r.readSecrets(ctx, due)
	provider := r.Provider
	if provider == nil {
		provider = DefaultProviders()
	}
	parallel := r.Parallel
	if parallel <= 0 {
		parallel = 4
	}
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, j := range due {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			var note string
			v, err := measureOne(ctx, provider, j, secrets, now, &note, writes)
			if errors.Is(err, ErrPending) {
				j.pending = true
				return
			}
			m := verdict.Judge(j.conds, v, err, now)
			m = verdict.WithNote(m, note)
			j.meas = &m
		}()
	}
	wg.Wait()
}

type secretResult struct {
	data SecretData
	err  error
}

// readSecrets reads each referenced Secret once.
func (r *Runner) readSecrets(ctx context.Context, due []*job) map[string]secretResult {
	out := map[string]secretResult{}
	for _, j := range due {
		if j.secret == "" {
			continue
		}
		if _, done := out[j.secret]; done {
			continue
		}
		if r.Secrets == nil {
			out[j.secret] = secretResult{err: errors.New("no secret reader configured")}
			continue
		}
		data, err := r.Secrets(ctx, j.secret)
		out[j.secret] = secretResult{data: data, err: err}
	}
	return out
}

func measureOne(ctx context.Context, p Provider, j *job, secrets map[string]secretResult, now time.Time, note *string, writes *Writes) (Value, error) {
	q := j.query
	q.Time, q.Note, q.Writes = now, note, writes
	if j.secret != "" {
		s := secrets[j.secret]
		if s.err != nil {
			return Value{}, fmt.Errorf("secret %q: %w", j.secret, s.err)
		}
		q.Secret = s.data
	}
	v, err := p.Measure(ctx, q)
	return v, redact(err, q.Secret)
}
