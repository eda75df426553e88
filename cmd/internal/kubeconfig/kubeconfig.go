// Package kubeconfig finds the cluster for rollgate's commands as kubectl
// does, and says what to do when there is none.
package kubeconfig

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
)

// Loader finds the cluster as kubectl does: the kubeconfig file (an
// explicit path, else $KUBECONFIG, else ~/.kube/config), else the
// in-cluster configuration; context "" is the current context.
func Loader(path, context string) clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context})
}

// Explain says what to do when no cluster is configured, in place of
// client-go's advice to set KUBERNETES_MASTER, a variable that nothing
// reads any more. Other errors are returned as they are.
func Explain(err error) error {
	if !clientcmd.IsEmptyConfig(err) {
		return err
	}
	return fmt.Errorf("no cluster to talk to: no kubeconfig ($KUBECONFIG is unset and %s does not exist) and not running in a pod; set KUBECONFIG or pass --kubeconfig", clientcmd.RecommendedHomeFile)
}
