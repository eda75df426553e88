package webhook_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/webhook/webhooktest"
	"github.com/rollgate/rollgate/test/envtest"
)

// The suite shares one API server and one webhook server.
var suite struct {
	env    *envtest.Env
	c      client.Client
	server *webhooktest.Server
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	env, err := envtest.New(envtest.WithScheme(scheme))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	suite.server, err = webhooktest.Run(ctx, env.Config, scheme, "rollgate-test", nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	suite.env, suite.c = env, env.Client
	return m.Run()
}
