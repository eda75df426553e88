package chartrun

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeImpersonating writes to dst a copy of the admin kubeconfig src,
// reduced to its current context, whose user acts as the ServiceAccount
// sa of namespace ns with the groups Kubernetes gives a ServiceAccount
// token. Requests then pass exactly the RBAC granted to the
// ServiceAccount.
func writeImpersonating(src, dst, ns, sa string) error {
	cfg, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return fmt.Errorf("chartrun: admin kubeconfig: %w", err)
	}
	// Certificate paths relative to the admin kubeconfig stay valid in
	// another folder.
	if err := clientcmd.ResolveLocalPaths(cfg); err != nil {
		return err
	}
	if err := clientcmdapi.MinifyConfig(cfg); err != nil {
		return err
	}
	user := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	if user == nil {
		return fmt.Errorf("chartrun: admin kubeconfig %s: the current context names no user", src)
	}
	user.Impersonate = "system:serviceaccount:" + ns + ":" + sa
	user.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	return clientcmd.WriteToFile(*cfg, dst)
}

// checkIdentity asks the API server who the kubeconfig at path is (a
// SelfSubjectReview) and fails unless it is the ServiceAccount sa of ns:
// a kubeconfig whose impersonation does not take would run the controller
// as the admin and hide every gap in the chart's RBAC.
func checkIdentity(ctx context.Context, path, ns, sa string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("chartrun: who is the impersonating kubeconfig: %w", err)
	}
	if got, want := r.Status.UserInfo.Username, "system:serviceaccount:"+ns+":"+sa; got != want {
		return fmt.Errorf("chartrun: the impersonating kubeconfig authenticates as %q, not %q", got, want)
	}
	return nil
}
