package gitsync

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
)

// DefaultCollectInterval is how often a started Writer with
// WriterOptions.Exists collects the status files of deleted Rollouts.
const DefaultCollectInterval = 10 * time.Minute

// RolloutExists reports whether the Rollout namespace/name exists. It
// must say false with a nil error only when the Rollout surely does not
// exist (the API server said NotFound); any doubt is an error, and the
// Rollout's status file is kept.
type RolloutExists func(ctx context.Context, namespace, name string) (bool, error)

// CollectResult describes one collection pass.
type CollectResult struct {
	// Checked counts the status files under the PathPrefix whose Rollout
	// was looked up.
	Checked int
	// Removed lists, sorted, the "<namespace>/<name>" whose file the pass
	// removed (through a flush).
	Removed []string
	// Kept counts the files kept because exists failed for them.
	Kept int
}

// Collect removes the status files of Rollouts that no longer exist: the
// files under PathPrefix at the status branch head ("<namespace>/<name>.yaml"
// that are status files; nothing else is touched) whose Rollout this
// Writer holds no state for and exists says is gone. It is the catch-all
// for a Remove that never reached Git (the controller restarted while Git
// was unreachable). The removals are written by one flush, fenced as every
// flush; its error is returned. A Rollout exists could not judge keeps its
// file, and the first such error is returned with the count.
func (w *Writer) Collect(ctx context.Context, exists RolloutExists) (CollectResult, error) {
	var res CollectResult
	if w.isFenced() {
		return res, nil
	}
	keys, err := w.statusKeys(ctx)
	if err != nil {
		return res, err
	}
	var firstErr error
	var gone []string
	for _, k := range keys {
		if w.holds(k) {
			continue
		}
		res.Checked++
		ns, name, _ := strings.Cut(k, "/")
		ok, err := exists(ctx, ns, name)
		switch {
		case err != nil:
			res.Kept++
			if firstErr == nil {
				firstErr = fmt.Errorf("Rollout %s: %w", k, err)
			}
		case !ok:
			gone = append(gone, k)
		}
	}
	for _, k := range gone {
		ns, name, _ := strings.Cut(k, "/")
		w.removeIfAbsent(ns, name)
	}
	var errs []error
	if firstErr != nil {
		errs = append(errs, fmt.Errorf("kept %d status file(s) whose Rollout could not be read, first: %w", res.Kept, firstErr))
	}
	if len(gone) > 0 {
		out, err := w.Flush(ctx)
		if err != nil {
			errs = append(errs, err)
		} else {
			removed := map[string]bool{}
			for _, k := range out.Changed {
				removed[k] = true
			}
			for _, k := range gone {
				if removed[k] {
					res.Removed = append(res.Removed, k)
				}
			}
		}
	}
	return res, errors.Join(errs...)
}

// statusKeys lists "<namespace>/<name>" of the status files under
// PathPrefix at the status branch head, sorted.
func (w *Writer) statusKeys(ctx context.Context) ([]string, error) {
	snap, err := w.repo.Snapshot(ctx, w.opts.Branch)
	if err != nil {
		return nil, fmt.Errorf("reading status files of %s: %w", w.opts.Branch, err)
	}
	files, err := snap.Files(w.opts.PathPrefix)
	if err != nil {
		return nil, fmt.Errorf("listing status files of %s: %w", w.opts.Branch, err)
	}
	var keys []string
	for _, f := range files {
		rel := strings.TrimPrefix(strings.TrimPrefix(f, w.opts.PathPrefix), "/")
		if strings.Count(rel, "/") != 1 || path.Ext(rel) != ".yaml" {
			continue
		}
		data, err := snap.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading %s on %s: %w", f, w.opts.Branch, err)
		}
		if isStatusFile(data) {
			keys = append(keys, strings.TrimSuffix(rel, ".yaml"))
		}
	}
	return keys, nil
}

// holds reports whether the Writer holds a state for key: its Rollout
// was seen alive by this process.
func (w *Writer) holds(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.states[key]
	return ok
}

// removeIfAbsent is Remove, unless a state was enqueued for the Rollout
// since it was found gone (created again).
func (w *Writer) removeIfAbsent(namespace, name string) {
	if w.holds(namespace + "/" + name) {
		return
	}
	w.Remove(namespace, name)
}

// collectEvery runs Collect with WriterOptions.Exists at once and then
// every CollectInterval until ctx ends or the Writer is fenced. Outcomes
// go to OnCollect.
func (w *Writer) collectEvery(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if w.isFenced() {
			return
		}
		res, err := w.Collect(ctx, w.opts.Exists)
		if w.opts.OnCollect != nil {
			w.opts.OnCollect(res, err)
		}
		t.Reset(w.opts.CollectInterval)
	}
}
