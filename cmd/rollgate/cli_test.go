package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/envtest"
)

// run executes the CLI with args and returns its output (with the error
// main would print) and the exit code main would use.
func run(t *testing.T, stdin string, args ...string) (string, int) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	if err != nil {
		out.WriteString("Error: " + err.Error() + "\n")
	}
	return out.String(), exitCode(err)
}

// writeKubeconfig writes a kubeconfig for cfg, namespace default.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["t"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["t"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["t"] = &clientcmdapi.Context{Cluster: "t", AuthInfo: "t", Namespace: "default"}
	kc.CurrentContext = "t"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// TestCLIAgainstAPIServer drives get, approve, pause, resume, abort and
// promote against a real API server and checks output formats and exit
// codes that scripts rely on.
func TestCLIAgainstAPIServer(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cfg, c := envtest.Start(t, envtest.WithScheme(scheme))
	kubeconfig := writeKubeconfig(t, cfg)
	ctx := context.Background()
	ro := &v1alpha1.Rollout{}
	if err := yaml.Unmarshal([]byte(`
metadata: {name: echo, namespace: default}
spec:
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: echo}
  strategy: {canary: {steps: [{replicas: 1, pause: {}}, {replicas: "100%"}]}}
`), ro); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, ro); err != nil {
		t.Fatal(err)
	}
	ro.Status = v1alpha1.RolloutStatus{
		Phase: v1alpha1.PhaseProgressing, StableRevision: "old", CanaryRevision: "new", Attempt: 1,
		CurrentStepIndex: 1, StepCount: 2, CurrentStepState: v1alpha1.StepPaused,
		StableReplicas: 4, StableReadyReplicas: 4, CanaryReplicas: 1, CanaryReadyReplicas: 1,
		AwaitingApproval: &v1alpha1.ApprovalRequest{Revision: "new", Step: 1, Since: metav1.Now(), Branch: "rollgate/approve/default/echo/new-step-1"},
	}
	if err := c.Status().Update(ctx, ro); err != nil {
		t.Fatal(err)
	}
	k := "--kubeconfig=" + kubeconfig

	out, code := run(t, "", "get", k)
	if code != exitOK || !strings.Contains(out, "echo") || !strings.Contains(out, "1/2") || !strings.Contains(out, "merge branch rollgate/approve/default/echo/new-step-1") {
		t.Fatalf("get: exit %d\n%s", code, out)
	}
	out, code = run(t, "", "get", "echo", "-o", "json", k)
	var items []v1alpha1.Rollout
	if code != exitOK || json.Unmarshal([]byte(out), &items) != nil || len(items) != 1 || items[0].Status.CanaryRevision != "new" {
		t.Fatalf("get -o json: exit %d\n%s", code, out)
	}
	if _, code = run(t, "", "get", "missing", k); code != exitNotFound {
		t.Fatalf("get of a missing Rollout: exit %d, want %d", code, exitNotFound)
	}
	if _, code = run(t, "", "get", "-o", "xml", k); code != exitUsage {
		t.Fatalf("get -o xml: exit %d, want %d", code, exitUsage)
	}

	if out, code = run(t, "", "approve", "default/echo", "--by", "alice", k); code != exitOK {
		t.Fatalf("approve: exit %d\n%s", code, out)
	}
	run(t, "", "approve", "default/echo", k) // idempotent
	got := &v1alpha1.Rollout{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(ro), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Approvals) != 1 || got.Spec.Approvals[0] != (v1alpha1.Approval{Revision: "new", Step: 1, ApprovedBy: "alice"}) {
		t.Fatalf("approvals after approve twice: %+v", got.Spec.Approvals)
	}

	// After a retry, the same gate of attempt 2 needs an approval naming
	// the attempt: the approval of attempt 1 does not count.
	got.Status.Attempt = 2
	got.Status.AwaitingApproval = &v1alpha1.ApprovalRequest{Revision: "new", Step: 1, Attempt: 2, Since: metav1.Now()}
	if err := c.Status().Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	if out, code = run(t, "", "get", "echo", k); code != exitOK || !strings.Contains(out, "approval of step 1, attempt 2 (rollgate approve default/echo)") {
		t.Fatalf("get of a gate of attempt 2: exit %d\n%s", code, out)
	}
	if out, code = run(t, "", "approve", "default/echo", "--by", "bob", k); code != exitOK || !strings.Contains(out, "approved step 1 of revision new, attempt 2") {
		t.Fatalf("approve of attempt 2: exit %d\n%s", code, out)
	}
	if out, code = run(t, "", "approve", "default/echo", k); code != exitOK || !strings.Contains(out, "already approved") {
		t.Fatalf("approve of attempt 2 again: exit %d\n%s", code, out)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(ro), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Approvals) != 2 || got.Spec.Approvals[1] != (v1alpha1.Approval{Revision: "new", Step: 1, Attempt: 2, ApprovedBy: "bob"}) {
		t.Fatalf("approvals after approving attempt 2 twice: %+v", got.Spec.Approvals)
	}

	run(t, "", "pause", "echo", k)
	if _ = c.Get(ctx, client.ObjectKeyFromObject(ro), got); !got.Spec.Strategy.Paused {
		t.Fatal("pause did not set spec.strategy.paused")
	}
	run(t, "", "resume", "echo", k)
	if _ = c.Get(ctx, client.ObjectKeyFromObject(ro), got); got.Spec.Strategy.Paused {
		t.Fatal("resume did not clear spec.strategy.paused")
	}
	if _, code = run(t, "n\n", "abort", "echo", k); code != exitUsage {
		t.Fatalf("abort answered no: exit %d, want %d", code, exitUsage)
	}
	if _, code = run(t, "", "abort", "echo", "--yes", k); code != exitOK {
		t.Fatalf("abort --yes: exit %d", code)
	}
	if _ = c.Get(ctx, client.ObjectKeyFromObject(ro), got); got.Spec.Abort == nil || got.Spec.Abort.Revision != "new" {
		t.Fatalf("abort did not set spec.abort for the canary revision: %+v", got.Spec.Abort)
	}
	out, code = run(t, "", "retry", "echo", k)
	if code != exitError || !strings.Contains(out, "has not failed") {
		t.Fatalf("retry of a release that has not failed: exit %d\n%s", code, out)
	}
}
