package argocd

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/rollgate/rollgate/test/repo"
)

// settings are the objects Argo CD's processes need before they start: the
// namespace, argocd-cm (no customizations: the tests and the walkthrough
// install rollgate's as the docs say), argocd-rbac-cm, argocd-secret and the
// default AppProject.
//
//go:embed settings.yaml
var settings string

// install applies Argo CD's CRDs from crds and its settings with kubectl,
// and waits until the CRDs are established.
func install(ctx context.Context, kubeconfig, crds string) error {
	if _, err := os.Stat(crds); err != nil {
		return fmt.Errorf("argocd: CRDs: %w (run 'make tools')", err)
	}
	kubectl, err := repo.LookTool("kubectl")
	if err != nil {
		return err
	}
	run := func(stdin string, args ...string) error {
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("argocd: kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("", "apply", "--server-side", "-f", crds); err != nil {
		return err
	}
	// kubectl wait fails at once on a CRD without status yet: retry.
	for i := 0; ; i++ {
		err := run("", "wait", "--for", "condition=established", "--timeout=30s",
			"crd/applications.argoproj.io", "crd/appprojects.argoproj.io")
		if err == nil {
			break
		}
		if i == 50 || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return run(settings, "apply", "-f", "-")
}
