package bench

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// resumingWatch is a watch the benchmarks time transitions with. When the
// API server closes it (a timeout, or a watcher it judged too slow), it
// is opened again from the last resourceVersion it saw, bookmarks
// included, as client-go's reflector does: nothing is replayed and no
// transition is missed or timestamped late. Only when that version is no
// longer served (410 Gone) does it start over from the current objects,
// whose first events then replay every object: replays counts those, and
// a transition passed meanwhile is timestamped late.
//
// Without the resume, a watch of 10,000 Rollouts closed once during a
// wave started over 125 times in a row: each new watch replayed 10,000
// objects to a consumer sharing the 2 cores with the controller, which
// the API server closed again as too slow, and every gate was
// timestamped at the end of the wave.
type resumingWatch struct {
	mu      sync.Mutex
	resumes int
	replays int
}

// startResumingWatch opens the first watch at once (so that no later
// transition is missed), then delivers every added or modified object to
// fn with its arrival time until ctx ends. newList gives an empty list of
// the watched kind.
func startResumingWatch(ctx context.Context, wc client.WithWatch, newList func() client.ObjectList, opts []client.ListOption, fn func(obj client.Object, at time.Time)) (*resumingWatch, error) {
	r := &resumingWatch{}
	open := func(rv string) (watch.Interface, error) {
		raw := &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}
		return wc.Watch(ctx, newList(), append(append([]client.ListOption{}, opts...), &client.ListOptions{Raw: raw})...)
	}
	first, err := open("")
	if err != nil {
		return nil, err
	}
	go func() {
		rv := ""
		for w := first; ; {
			rv = r.consume(w, rv, fn)
			w.Stop()
			for {
				if ctx.Err() != nil {
					return
				}
				var err error
				if w, err = open(rv); err == nil {
					r.count(rv)
					break
				}
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					rv = ""
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()
	return r, nil
}

// consume delivers w's events to fn until w closes, and returns the
// resourceVersion to resume from ("" when the API server no longer
// serves rv: start over).
func (r *resumingWatch) consume(w watch.Interface, rv string, fn func(obj client.Object, at time.Time)) string {
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Error:
			if err := apierrors.FromObject(ev.Object); apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
			}
			continue
		case watch.Bookmark:
			if obj, ok := ev.Object.(client.Object); ok {
				rv = obj.GetResourceVersion()
			}
			continue
		}
		obj, ok := ev.Object.(client.Object)
		if !ok {
			continue
		}
		rv = obj.GetResourceVersion()
		if ev.Type == watch.Added || ev.Type == watch.Modified {
			fn(obj, time.Now())
		}
	}
	return rv
}

// count records a re-open: a resume from rv, or a start over.
func (r *resumingWatch) count(rv string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rv == "" {
		r.replays++
	} else {
		r.resumes++
	}
}

// reopened returns how many times the watch was resumed from its last
// version (no time late) and how many times it started over (some times
// late).
func (r *resumingWatch) reopened() (resumes, replays int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resumes, r.replays
}
