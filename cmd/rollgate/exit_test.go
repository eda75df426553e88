package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets a test run this test binary as the rollgate command
// (runMain), so that the exit codes and the environment are the shell's.
func TestMain(m *testing.M) {
	if os.Getenv("ROLLGATE_TEST_RUN_MAIN") == "1" {
		main()
		os.Exit(exitOK)
	}
	os.Exit(m.Run())
}

// runMain runs `rollgate args...` as a process with no cluster configured:
// no $KUBECONFIG, a $HOME without .kube/config, not in a pod. It returns
// the combined output and the exit code.
func runMain(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	env := []string{"ROLLGATE_TEST_RUN_MAIN=1", "HOME=" + t.TempDir()}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "KUBECONFIG", "HOME", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT":
		default:
			env = append(env, kv)
		}
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("running rollgate %s: %v", strings.Join(args, " "), err)
		}
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// TestExitCodes checks what docs/cli.md promises a script: usage errors
// exit 2 (whether cobra or rollgate finds them), other errors 1, and each
// message says what to fix.
func TestExitCodes(t *testing.T) {
	empty := t.TempDir()
	missing := filepath.Join(empty, "no-such-dir")
	for _, tc := range []struct {
		name string
		args []string
		code int
		// say must be in the output; never must not.
		say   []string
		never []string
	}{
		{"unknown flag", []string{"get", "--bogus"}, exitUsage, []string{"unknown flag: --bogus"}, nil},
		{"unknown command", []string{"gett"}, exitUsage, []string{`unknown command "gett"`, "did you mean get?"}, nil},
		{"unknown subcommand of a group", []string{"lua", "tset"}, exitUsage, []string{`unknown command "tset" for "rollgate lua"`}, nil},
		{"too many arguments", []string{"get", "a", "b"}, exitUsage, []string{"accepts at most 1 arg"}, nil},
		{"a group alone prints its help", []string{"lua"}, exitOK, []string{"rollgate lua [command]"}, nil},
		{"bad -o before the cluster", []string{"get", "-o", "xml"}, exitUsage, []string{`-o "xml": use table, yaml or json`}, []string{"kubeconfig"}},
		{"no cluster configured", []string{"get"}, exitError, []string{"set KUBECONFIG or pass --kubeconfig", "not running in a pod"}, []string{"KUBERNETES_MASTER"}},
		{"no cluster for the controller", []string{"controller"}, exitError, []string{"set KUBECONFIG or pass --kubeconfig"}, []string{"KUBERNETES_MASTER"}},
		{"lua test of an empty folder", []string{"lua", "test", empty}, exitError, []string{"no test cases in " + empty}, []string{"0 failed"}},
		{"lua test of a mistyped folder", []string{"lua", "test", missing}, exitError, []string{missing}, []string{"0 failed"}},
		{"the demo moved", []string{"demo"}, exitUsage, []string{"make demo", "bin/rollgate-demo"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code := runMain(t, tc.args...)
			if code != tc.code {
				t.Errorf("rollgate %s: exit %d, want %d\n%s", strings.Join(tc.args, " "), code, tc.code, out)
			}
			for _, s := range tc.say {
				if !strings.Contains(out, s) {
					t.Errorf("rollgate %s does not say %q:\n%s", strings.Join(tc.args, " "), s, out)
				}
			}
			for _, s := range tc.never {
				if strings.Contains(out, s) {
					t.Errorf("rollgate %s says %q:\n%s", strings.Join(tc.args, " "), s, out)
				}
			}
		})
	}
}
