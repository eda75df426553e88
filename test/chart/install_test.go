package chart

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/rollgate/rollgate/test/kwok"
)

// TestInstallUpgradeUninstall installs the chart on a kwok cluster (a real
// control plane), upgrades it with changed values, and uninstalls it.
// kwok's fake kubelets run no containers, so this proves the manifests are
// accepted and become Ready; the controller's behaviour is tested elsewhere.
func TestInstallUpgradeUninstall(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := kwok.Start(t, kwok.Options{Nodes: 2, Scheme: scheme})
	kc := "--kubeconfig=" + c.Kubeconfig
	ns := "rollgate-system"

	out := helm(t, "install", "rg", chartDir(), kc, "-n", ns, "--create-namespace", "--wait", "--timeout=2m")
	if !strings.Contains(out, "STATUS: deployed") {
		t.Fatalf("helm install:\n%s", out)
	}
	waitReplicas(t, c, ns, "rg-rollgate", 2)
	for _, crd := range []string{"rollouts.rollgate.dev", "repositories.rollgate.dev", "analysistemplates.rollgate.dev"} {
		var obj apiextensionsv1.CustomResourceDefinition
		if err := c.Client.Get(context.Background(), types.NamespacedName{Name: crd}, &obj); err != nil {
			t.Fatalf("CRD %s not installed: %v", crd, err)
		}
	}

	// The controller writes its CA bundle into the webhook configurations;
	// an upgrade (say, in the middle of a release) must keep them, or
	// covered workloads could not be updated until the controller notices.
	bundle := []byte("test CA bundle written by the controller")
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Client.Get(context.Background(), types.NamespacedName{Name: "rg-rollgate"}, &mwc); err != nil {
		t.Fatal(err)
	}
	mwc.Webhooks[0].ClientConfig.CABundle = bundle
	if err := c.Client.Update(context.Background(), &mwc); err != nil {
		t.Fatal(err)
	}

	helm(t, "upgrade", "rg", chartDir(), kc, "-n", ns, "--set", "replicaCount=3", "--set", "logLevel=debug", "--wait", "--timeout=2m")
	waitReplicas(t, c, ns, "rg-rollgate", 3)
	if err := c.Client.Get(context.Background(), types.NamespacedName{Name: "rg-rollgate"}, &mwc); err != nil {
		t.Fatal(err)
	}
	if got := string(mwc.Webhooks[0].ClientConfig.CABundle); got != string(bundle) {
		t.Fatalf("helm upgrade replaced the webhook CA bundle the controller wrote: %q", got)
	}

	helm(t, "uninstall", "rg", kc, "-n", ns, "--wait", "--timeout=2m")
	var d appsv1.Deployment
	if err := c.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "rg-rollgate"}, &d); err == nil {
		t.Fatal("the controller Deployment is still there after helm uninstall")
	}
	// Helm keeps CRDs on uninstall (and so the users' Rollouts): documented.
	var crd apiextensionsv1.CustomResourceDefinition
	if err := c.Client.Get(context.Background(), types.NamespacedName{Name: "rollouts.rollgate.dev"}, &crd); err != nil {
		t.Fatalf("CRDs must survive helm uninstall: %v", err)
	}
}

func waitReplicas(t *testing.T, c *kwok.Cluster, ns, name string, n int32) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		var d appsv1.Deployment
		if err := c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &d); err != nil {
			return false, nil
		}
		return d.Status.ReadyReplicas == n && d.Status.UpdatedReplicas == n, nil
	})
	if err != nil {
		t.Fatalf("Deployment %s/%s did not reach %d ready replicas: %v", ns, name, n, err)
	}
}
