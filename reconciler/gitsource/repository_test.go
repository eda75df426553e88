package gitsource

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/reconciler/internal/rollouttest"
	"github.com/rollgate/rollgate/test/gitserver"
)

// TestMarkRepository maps what the last fetch and flush said into the
// Repository's status, and changes nothing that the status already says
// (a restarted controller, a fetch finding the same head).
func TestMarkRepository(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	repo, err := gitsync.Open(gitsync.Options{URL: "https://git.example.com/app.git"})
	if err != nil {
		t.Fatal(err)
	}
	old := v1alpha1.RepositoryStatus{
		LastFetchedCommit: "aaa", LastFetchTime: &metav1.Time{Time: t0}, LastStatusCommit: "sss",
		Conditions: []metav1.Condition{{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonGitReachable,
			Message: "last fetch of main and last write to rollgate/status succeeded", LastTransitionTime: metav1.Time{Time: t0}}},
	}
	for _, tc := range []struct {
		name   string
		status v1alpha1.RepositoryStatus
		health gitHealth
		want   v1alpha1.RepositoryStatus
		// ready is the Ready condition wanted: status, reason, message.
		ready [3]string
	}{
		{
			name:   "first fetch",
			health: gitHealth{tracked: true, head: "aaa", headAt: t0},
			want:   v1alpha1.RepositoryStatus{LastFetchedCommit: "aaa", LastFetchTime: &metav1.Time{Time: t0}},
			ready:  [3]string{"True", v1alpha1.ReasonGitReachable, "last fetch of main succeeded"},
		},
		{
			name:   "restarted: same head fetched later, nothing flushed yet",
			status: old,
			health: gitHealth{tracked: true, head: "aaa", headAt: t0.Add(time.Hour)},
			want:   old,
			ready:  [3]string{"True", v1alpha1.ReasonGitReachable, "last fetch of main and last write to rollgate/status succeeded"},
		},
		{
			name:   "a new head and a new status commit",
			status: old,
			health: gitHealth{tracked: true, head: "bbb", headAt: t0.Add(time.Minute), statusCommit: "ttt"},
			want:   v1alpha1.RepositoryStatus{LastFetchedCommit: "bbb", LastFetchTime: &metav1.Time{Time: t0.Add(time.Minute)}, LastStatusCommit: "ttt"},
			ready:  [3]string{"True", v1alpha1.ReasonGitReachable, "last fetch of main and last write to rollgate/status succeeded"},
		},
		{
			name:   "fetch fails: the commits stay",
			status: old,
			health: gitHealth{tracked: true, head: "aaa", headAt: t0, fetchErr: errors.New("fetching main from https://git.example.com/app.git: connection refused")},
			want:   old,
			ready:  [3]string{"False", v1alpha1.ReasonGitError, "fetching main from https://git.example.com/app.git: connection refused"},
		},
		{
			name:   "status write fails",
			status: old,
			health: gitHealth{tracked: true, head: "aaa", headAt: t0, flushErr: errors.New("writing rollout status to rollgate/status: refusing")},
			want:   old,
			ready:  [3]string{"False", v1alpha1.ReasonGitError, "writing rollout status to rollgate/status: refusing"},
		},
		{
			name:   "no tracked branch on the remote",
			health: gitHealth{tracked: true},
			ready:  [3]string{"False", v1alpha1.ReasonGitError, "git branch not found: main in https://git.example.com/app.git"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &v1alpha1.Repository{Status: *tc.status.DeepCopy()}
			e := &Repo{clone: repo, branch: "main", statusBranch: "rollgate/status", health: tc.health}
			markRepository(r, e)
			c := conditions.Get(r, v1alpha1.ReadyCondition)
			if got := [3]string{string(c.Status), c.Reason, c.Message}; got != tc.ready {
				t.Errorf("Ready = %v, want %v", got, tc.ready)
			}
			r.Status.Conditions, tc.want.Conditions = nil, nil
			if got, want := r.Status, tc.want; got.LastFetchedCommit != want.LastFetchedCommit || got.LastStatusCommit != want.LastStatusCommit ||
				!got.LastFetchTime.Equal(want.LastFetchTime) {
				t.Errorf("status = %+v, want %+v", got, want)
			}
			if tc.status.Conditions != nil && tc.ready[0] == "True" && !c.LastTransitionTime.Equal(&tc.status.Conditions[0].LastTransitionTime) {
				t.Errorf("Ready rewritten: last transition %v, want %v", c.LastTransitionTime, tc.status.Conditions[0].LastTransitionTime)
			}
		})
	}
}

// TestGitHealthReportsChangesOnly: a fetch or flush that says what the
// last one said asks for no reconcile of the Repository.
func TestGitHealthReportsChangesOnly(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	refused := errors.New("connection refused")
	var h gitHealth
	steps := []struct {
		name string
		do   func() bool
		want bool
	}{
		{"first fetch", func() bool { return h.fetched(true, "aaa", t0, nil) }, true},
		{"same head", func() bool { return h.fetched(true, "aaa", t0.Add(time.Second), nil) }, false},
		{"another branch", func() bool { return h.fetched(false, "", t0, nil) }, false},
		{"fetch fails", func() bool { return h.fetched(true, "", t0, refused) }, true},
		{"fails again", func() bool { return h.fetched(true, "", t0, errors.New("connection refused")) }, false},
		{"back", func() bool { return h.fetched(true, "aaa", t0, nil) }, true},
		{"new head", func() bool { return h.fetched(true, "bbb", t0.Add(time.Minute), nil) }, true},
		{"first flush", func() bool { return h.flushed("sss", nil) }, true},
		{"same commit", func() bool { return h.flushed("sss", nil) }, false},
		{"flush fails", func() bool { return h.flushed("", refused) }, true},
		{"flush back", func() bool { return h.flushed("sss", nil) }, true},
	}
	for _, s := range steps {
		if got := s.do(); got != s.want {
			t.Errorf("%s: changed = %v, want %v (health %+v)", s.name, got, s.want, h)
		}
	}
	if h.head != "bbb" || !h.headAt.Equal(t0.Add(time.Minute)) || h.statusCommit != "sss" || h.fetchErr != nil || h.flushErr != nil {
		t.Errorf("health = %+v", h)
	}
}

// TestTheNextCheckIsDueAnIntervalAfterThisOne: the Repository controller
// looks again an interval after a check started, not after it ended: a
// fetch and a status write take a second and more on a loaded machine,
// and gates polled every 5 s waited 6-7 s for a merge.
func TestTheNextCheckIsDueAnIntervalAfterThisOne(t *testing.T) {
	ctx, _, c, _ := rollouttest.StartAPIServer(t)
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"README.md": "hello\n"})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "recheck"
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	repo := &v1alpha1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-repo"},
		Spec: v1alpha1.RepositorySpec{URL: url, Branch: "main"}}
	rollouttest.MustCreate(t, c, repo)
	// The check starts at t0 and, fetch and status write done, ends 2 s later.
	t0 := time.Now()
	var calls atomic.Int32
	clock := func() time.Time {
		if calls.Add(1) == 1 {
			return t0
		}
		return t0.Add(2 * time.Second)
	}
	g := NewPool(c, Options{InsecureHTTP: true, Now: clock})
	r := &RepositoryReconciler{Client: c, git: g}
	res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(repo)})
	if err != nil {
		t.Fatal(err)
	}
	if want := repositoryCheck - 2*time.Second; res.RequeueAfter != want {
		t.Fatalf("a check that took 2 s looks again in %v, want %v (repositoryCheck after it started)", res.RequeueAfter, want)
	}
}
