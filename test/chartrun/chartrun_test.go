package chartrun

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
)

func TestOverrideReplacesNeverDuplicates(t *testing.T) {
	set := []flagValue{
		{"webhook-port", "40001"},
		{"metrics-bind-address", "127.0.0.1:40002"},
		{"kubeconfig", "/tmp/kc"},
		{"webhook-url", "https://127.0.0.1:40001"},
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{{
		name: "--flag=value replaced in place",
		args: []string{"controller", "--webhook-port=9443", "--log-level=info"},
		want: []string{"controller", "--webhook-port=40001", "--log-level=info",
			"--metrics-bind-address=127.0.0.1:40002", "--kubeconfig=/tmp/kc", "--webhook-url=https://127.0.0.1:40001"},
	}, {
		name: "--flag value replaced with its value",
		args: []string{"controller", "--metrics-bind-address", ":8080", "--leader-elect=true"},
		want: []string{"controller", "--metrics-bind-address=127.0.0.1:40002", "--leader-elect=true",
			"--webhook-port=40001", "--kubeconfig=/tmp/kc", "--webhook-url=https://127.0.0.1:40001"},
	}, {
		name: "every occurrence, of both forms, gives one",
		args: []string{"controller", "--webhook-port", "9443", "--webhook-service=rg-webhook", "--webhook-port=9444",
			"--kubeconfig=/a", "--kubeconfig", "/b", "--webhook-url=https://x", "--metrics-bind-address=:8080"},
		want: []string{"controller", "--webhook-port=40001", "--webhook-service=rg-webhook",
			"--kubeconfig=/tmp/kc", "--webhook-url=https://127.0.0.1:40001", "--metrics-bind-address=127.0.0.1:40002"},
	}, {
		name: "flags with a common prefix are other flags",
		args: []string{"controller", "--webhook-port-extra=1", "--webhook=2"},
		want: []string{"controller", "--webhook-port-extra=1", "--webhook=2",
			"--webhook-port=40001", "--metrics-bind-address=127.0.0.1:40002", "--kubeconfig=/tmp/kc", "--webhook-url=https://127.0.0.1:40001"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := override(tc.args, set)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("override(%q)\n got %q\nwant %q", tc.args, got, tc.want)
			}
		})
	}
}

// TestLocalFlagsOverTheChartsArgs: the chart's own listen addresses are
// replaced by loopback ones, its other flags are kept as they are.
func TestLocalFlagsOverTheChartsArgs(t *testing.T) {
	chart := []string{"controller", "--namespace=rollgate-system", "--leader-elect=true", "--metrics-bind-address=:8080",
		"--health-probe-bind-address=:8081", "--webhook-port=9443", "--webhook-service=rg-rollgate-webhook",
		"--git-webhook-bind-address=:9292", "--log-level=info"}
	got := override(chart, localFlags("/tmp/kc", ports{webhook: 41000, metrics: 41001, health: 41002, gitPush: 41003}, true))
	want := []string{"controller", "--namespace=rollgate-system", "--leader-elect=true", "--metrics-bind-address=127.0.0.1:41001",
		"--health-probe-bind-address=127.0.0.1:41002", "--webhook-port=41000", "--webhook-service=rg-rollgate-webhook",
		"--git-webhook-bind-address=127.0.0.1:41003", "--log-level=info",
		"--kubeconfig=/tmp/kc", "--webhook-url=https://127.0.0.1:41000", "--webhook-bind-host=127.0.0.1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("\n got %q\nwant %q", got, want)
	}
}

func deploymentWith(ctr corev1.Container, sa string) *appsv1.Deployment {
	d := &appsv1.Deployment{}
	d.Spec.Template.Spec.ServiceAccountName = sa
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "sidecar"}, ctr}
	return d
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

func TestContainerSpecResolvesAsTheKubelet(t *testing.T) {
	dep := deploymentWith(corev1.Container{
		Name: "controller",
		Args: []string{"--namespace=$(POD_NAMESPACE)", "--id=$(POD_NAME)", "--literal=$$(POD_NAMESPACE)", "--unknown=$(NOPE)"},
		Env: []corev1.EnvVar{
			fieldEnv("POD_NAMESPACE", "metadata.namespace"),
			fieldEnv("POD_NAME", "metadata.name"),
			{Name: "WHERE", Value: "in $(POD_NAMESPACE)"},
		},
	}, "rg-rollgate")
	got, err := containerSpec(dep, ContainerName, "rollgate-system", "rg-rollgate-abc-def")
	if err != nil {
		t.Fatal(err)
	}
	want := container{
		args:           []string{"--namespace=rollgate-system", "--id=rg-rollgate-abc-def", "--literal=$(POD_NAMESPACE)", "--unknown=$(NOPE)"},
		env:            []string{"POD_NAMESPACE=rollgate-system", "POD_NAME=rg-rollgate-abc-def", "WHERE=in rollgate-system"},
		serviceAccount: "rg-rollgate",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("\n got %+v\nwant %+v", got, want)
	}
	if sa := must(containerSpec(deploymentWith(corev1.Container{Name: "controller", Args: []string{"--log-level=info"}}, ""), ContainerName, "ns", "p")).serviceAccount; sa != "default" {
		t.Errorf("a pod without serviceAccountName runs as %q, want default", sa)
	}
}

func must(c container, err error) container {
	if err != nil {
		panic(err)
	}
	return c
}

func TestContainerSpecFailsOnWhatItCannotResolve(t *testing.T) {
	secret := corev1.EnvVar{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "t"}}}
	for _, tc := range []struct {
		name string
		dep  *appsv1.Deployment
		want string
	}{
		{"no controller container", deploymentWith(corev1.Container{Name: "manager"}, "sa"), `no container "controller"`},
		{"a Secret", deploymentWith(corev1.Container{Name: "controller", Args: []string{"--log-level=info"}, Env: []corev1.EnvVar{secret}}, "sa"), "env TOKEN: valueFrom secretKeyRef"},
		{"a pod IP", deploymentWith(corev1.Container{Name: "controller", Args: []string{"--log-level=info"}, Env: []corev1.EnvVar{fieldEnv("IP", "status.podIP")}}, "sa"), "env IP: fieldRef status.podIP"},
		{"envFrom", deploymentWith(corev1.Container{Name: "controller", Args: []string{"--log-level=info"}, EnvFrom: []corev1.EnvFromSource{{}}}, "sa"), "envFrom"},
		{"a command", deploymentWith(corev1.Container{Name: "controller", Command: []string{"/other"}}, "sa"), "sets command"},
		{"another subcommand", deploymentWith(corev1.Container{Name: "controller", Args: []string{"version"}}, "sa"), "takes flags only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := containerSpec(tc.dep, ContainerName, "ns", "pod")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestImpersonatingKubeconfig(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "admin.yaml")
	for _, f := range []string{"admin.crt", "admin.key"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("not parsed here"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	admin := `apiVersion: v1
kind: Config
current-context: kwok
clusters:
- {name: kwok, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}
- {name: other, cluster: {server: "https://10.0.0.1"}}
users:
- {name: admin, user: {client-certificate: admin.crt, client-key: admin.key}}
- {name: other, user: {token: other-token}}
contexts:
- {name: kwok, context: {cluster: kwok, user: admin}}
- {name: other, context: {cluster: other, user: other}}
`
	if err := os.WriteFile(src, []byte(admin), 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "kubeconfig")
	if err := writeImpersonating(src, dst, "rollgate-system", "rg-rollgate"); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", dst)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" {
		t.Errorf("host %s, want the admin's current cluster", cfg.Host)
	}
	if got, want := cfg.Impersonate.UserName, "system:serviceaccount:rollgate-system:rg-rollgate"; got != want {
		t.Errorf("acts as %q, want %q", got, want)
	}
	if got, want := cfg.Impersonate.Groups, []string{"system:serviceaccounts", "system:serviceaccounts:rollgate-system", "system:authenticated"}; !reflect.DeepEqual(got, want) {
		t.Errorf("groups %q, want %q", got, want)
	}
	if cfg.CertFile != filepath.Join(dir, "admin.crt") || cfg.KeyFile != filepath.Join(dir, "admin.key") {
		t.Errorf("client certificate %s and key %s, want them resolved against the admin kubeconfig's folder %s", cfg.CertFile, cfg.KeyFile, dir)
	}
	raw, _ := os.ReadFile(dst)
	if strings.Contains(string(raw), "10.0.0.1") {
		t.Errorf("other contexts of the admin kubeconfig were copied:\n%s", raw)
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "B": "two"}
	for in, want := range map[string]string{
		"$(A)-$(B)": "1-two", "$$(A)": "$(A)", "$(C)": "$(C)", "$(A": "$(A", "a$b": "a$b", "end$": "end$", "$$$(A)": "$1",
	} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}
