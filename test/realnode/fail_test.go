package realnode

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A component that dies while the node comes up fails the start at once
// with its name, its command line and the end of its log, not at a
// timeout.
func TestComponentThatDiesIsReportedWithCommandAndLog(t *testing.T) {
	c := &Cluster{Dir: t.TempDir()}
	comp, err := c.start("kubelet", "/bin/sh", "-c", "echo 'E0101 failed to run Kubelet: no cgroup mount'; exit 1")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = c.waitFor(context.Background(), comp, "registers node "+NodeName, time.Minute, func() bool { return false })
	if err == nil {
		t.Fatal("waitFor returned no error for a component that exited")
	}
	for _, want := range []string{"kubelet did not come up", "registers node", "command: /bin/sh -c", "failed to run Kubelet: no cgroup mount"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the failure took %s to report, want well under the 1 min limit", d)
	}
	_ = c.Delete()
}

// A component that never becomes ready fails at its limit with the same
// details.
func TestComponentThatHangsIsReportedAtItsLimit(t *testing.T) {
	c := &Cluster{Dir: t.TempDir()}
	comp, err := c.start("etcd", "/bin/sh", "-c", "echo 'waiting for a disk that never comes'; sleep 60")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Delete()
	err = c.waitFor(context.Background(), comp, "healthy", time.Second, func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "etcd did not come up: it never healthy within 1s") ||
		!strings.Contains(err.Error(), "waiting for a disk that never comes") || !strings.Contains(err.Error(), "command: /bin/sh") {
		t.Errorf("got %v", err)
	}
}
