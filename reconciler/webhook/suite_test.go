package webhook_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/reconciler/webhook/webhooktest"
	"github.com/rollgate/rollgate/test/envtest"
	"github.com/rollgate/rollgate/test/rig"
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
	scheme, err := rig.Scheme()
	if err != nil {
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
