package flux

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rollgate/rollgate/test/proc"
)

// Notification is a running notification-controller.
type Notification struct {
	// EventsURL is its event receiver, http://127.0.0.1:<port>/: where
	// controllers post their events (Flux's --events-addr).
	EventsURL string

	running
}

// StartNotification starts notification-controller (Options.Bin holds
// its binary; Options.Dir gets notification-controller.log) and waits until
// its event receiver and health endpoint listen. On error nothing is left
// running. It is independent of Start: stop each with its own Stop.
func StartNotification(ctx context.Context, o Options) (*Notification, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := proc.FreePorts(4)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	args := []string{
		"--events-addr=" + addr(0),
		"--health-addr=" + addr(1),
		"--metrics-addr=" + addr(2),
		"--receiverAddr=" + addr(3),
	}
	env := []string{"KUBECONFIG=" + o.Kubeconfig, "RUNTIME_NAMESPACE=" + o.Namespace}
	p, err := startController(o.Dir, NotificationController, filepath.Join(o.Bin, NotificationController), args, env)
	if err != nil {
		return nil, err
	}
	n := &Notification{EventsURL: "http://" + addr(0) + "/", running: running{procs: []*proc.Process{p}}}
	if err := waitListening(ctx, 60*time.Second, n.Exited, addr(0), addr(1)); err != nil {
		return nil, errors.Join(err, n.Stop())
	}
	return n, nil
}
