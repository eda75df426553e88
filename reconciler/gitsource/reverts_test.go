package gitsource

import (
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

// TestRevertCleanupsAreForgottenWithTheRollout: what a Repo records of the
// revert cleanups it ran is one entry per Rollout, served once per
// occasion, and dropped when the Rollout is deleted, so it does not grow
// with Rollouts that came and went.
func TestRevertCleanupsAreForgottenWithTheRollout(t *testing.T) {
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"a": "a\n"})
	if err != nil {
		t.Fatal(err)
	}
	writes, err := gitsync.Open(gitsync.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	g := NewPool(nil, Options{})
	e := &Repo{pool: g, writes: writes, clone: writes}
	g.entries[types.NamespacedName{Namespace: "apps", Name: "repo"}] = e

	web := types.NamespacedName{Namespace: "shop", Name: "web"}
	cart := types.NamespacedName{Namespace: "shop", Name: "cart"}
	served := func(key types.NamespacedName, occasion string) bool {
		e.reverts.mu.Lock()
		defer e.reverts.mu.Unlock()
		st := e.reverts.m[key]
		return st != nil && !st.running && st.done == occasion
	}
	for _, key := range []types.NamespacedName{web, cart} {
		e.CleanupReverts(logr.Discard(), key, "main", "Completed/a/1")
	}
	deadline := time.Now().Add(time.Minute)
	for !(served(web, "Completed/a/1") && served(cart, "Completed/a/1")) {
		if time.Now().After(deadline) {
			t.Fatal("the cleanups of web and cart were not served within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}

	g.forgetRollout(web.Namespace, web.Name)
	e.reverts.mu.Lock()
	_, webKept := e.reverts.m[web]
	_, cartKept := e.reverts.m[cart]
	n := len(e.reverts.m)
	e.reverts.mu.Unlock()
	if webKept || !cartKept || n != 1 {
		t.Fatalf("after web was deleted the Repo records %d Rollouts (web %v, cart %v); want cart only", n, webKept, cartKept)
	}
}
