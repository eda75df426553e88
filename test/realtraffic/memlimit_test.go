package realtraffic

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestControllerSoftMemoryLimitFromItsContainer: the controller, installed
// by its chart as a pod with the chart's memory limit, gives the Go runtime
// a soft limit of 90% of that limit, read from its container's cgroup
// (docs/install.md "Memory"): near the limit the collector works harder
// instead of the kernel killing the pod.
func TestControllerSoftMemoryLimitFromItsContainer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), nodeSetupBudget)
	defer cancel()
	node, err := theNode.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DeploymentList
	if err := node.Client.List(ctx, &ds, client.InNamespace(releaseNS), client.MatchingLabels{"app.kubernetes.io/name": release}); err != nil || len(ds.Items) != 1 {
		t.Fatalf("the controller's Deployment in %s: %d found, %v", releaseNS, len(ds.Items), err)
	}
	limit := ds.Items[0].Spec.Template.Spec.Containers[0].Resources.Limits.Memory().Value()
	if limit == 0 {
		t.Fatal("the chart sets no memory limit on the controller: nothing to derive a soft limit from")
	}
	want := int64(float64(limit) * 0.9)
	logs, err := node.Kubectl(ctx, "-n", releaseNS, "logs", "--tail=-1", "-l", "app.kubernetes.io/name="+release, "--all-containers")
	if err != nil {
		t.Fatalf("controller logs: %v\n%s", err, logs)
	}
	found := regexp.MustCompile(`soft memory limit set from the container's limit.*"GOMEMLIMIT":\s*(\d+)`).FindStringSubmatch(logs)
	if found == nil {
		t.Fatalf("the controller logged no soft memory limit (limit %d bytes); its log starts:\n%s", limit, head(logs, 20))
	}
	got, _ := strconv.ParseInt(found[1], 10, 64)
	if got != want {
		t.Fatalf("soft memory limit %d bytes, want 90%% of the container's %d: %d", got, limit, want)
	}
	t.Logf("container limit %d MiB, soft limit %d MiB", limit>>20, got>>20)
}

// head returns the first n lines of s.
func head(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
