package gitsource

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// Lease names the leader election Lease of this process and the identity
// it holds it as. The status writers write under the epoch read from it
// (see gitsync.Fence).
type Lease struct {
	// Namespace and Name of the Lease.
	Namespace, Name string
	// Identity is this process's spec.holderIdentity in it.
	Identity string
}

// String is "<namespace>/<name>".
func (l Lease) String() string { return l.Namespace + "/" + l.Name }

// ErrNotLeader means the Lease is not held by this process.
var ErrNotLeader = errors.New("this process does not hold the leader election Lease")

// leaseEpoch reads l with r (uncached: the API server's current Lease)
// and returns this process's leadership epoch: the Lease's creation time
// in seconds, times epochsPerLease, plus spec.leaseTransitions + 1.
// client-go's leader election adds one to leaseTransitions every time
// another identity takes the Lease, and an identity is one process, so
// the epoch grows with every new leader. A Lease deleted and created
// again (its namespace deleted and rollgate installed anew) starts
// leaseTransitions from 0, but it is created later: its epochs are still
// higher than every epoch of the Lease before it. The +1 keeps 0 for "no
// leader election". It fails with ErrNotLeader when another identity (or
// none) holds the Lease.
func leaseEpoch(ctx context.Context, r client.Reader, l Lease) (uint64, error) {
	var lease coordinationv1.Lease
	if err := r.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: l.Name}, &lease); err != nil {
		return 0, fmt.Errorf("reading leader election Lease %s: %w", l, err)
	}
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	if holder != l.Identity {
		return 0, fmt.Errorf("%w: Lease %s is held by %q, this process is %q", ErrNotLeader, l, holder, l.Identity)
	}
	transitions := int32(0)
	if lease.Spec.LeaseTransitions != nil {
		transitions = *lease.Spec.LeaseTransitions
	}
	created := lease.CreationTimestamp.Unix()
	if transitions < 0 || transitions >= epochsPerLease-1 || created < 0 {
		return 0, fmt.Errorf("Lease %s: spec.leaseTransitions %d or creation time %s out of range", l, transitions, lease.CreationTimestamp)
	}
	return uint64(created)*epochsPerLease + uint64(transitions) + 1, nil
}

// epochsPerLease bounds the leader changes one Lease can count: a million,
// against creation times of about 2e9 s, stays far inside a uint64.
const epochsPerLease = 1_000_000

// fence returns the leadership the status writers write under: the zero
// Fence without leader election, else the epoch read from the Lease the
// first time it is asked for (the process leads until it exits).
func (g *Pool) fence(ctx context.Context) (gitsync.Fence, error) {
	l := g.defaults.Lease
	if l == nil {
		return gitsync.Fence{}, nil
	}
	g.fenceMu.Lock()
	defer g.fenceMu.Unlock()
	if g.epoch > 0 {
		return gitsync.Fence{Epoch: g.epoch, Lease: l.String(), Holder: l.Identity}, nil
	}
	epoch, err := leaseEpoch(ctx, g.reader, *l)
	if err != nil {
		return gitsync.Fence{}, err
	}
	g.epoch = epoch
	return gitsync.Fence{Epoch: epoch, Lease: l.String(), Holder: l.Identity}, nil
}

// rolloutExists is the gitsync.RolloutExists of the status writers: a
// live read, so a Rollout of another shard, or one the cache has not seen
// yet, counts; only NotFound says a Rollout is gone.
func (g *Pool) rolloutExists(ctx context.Context, namespace, name string) (bool, error) {
	err := g.reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &v1alpha1.Rollout{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, err
}

// leaderPushEndpoint returns the gitpush.Server Leader of a replica
// serving its push endpoint on port: the endpoint of the pod that holds l.
// A replica's identity in the Lease is "<hostname>_<uuid>" and a pod's
// hostname is its name, so the leader is the pod of that name in the
// Lease's namespace (the chart's Deployment), listening on the same port.
// r reads live (the Lease changes hands; Pods of this namespace are not
// all cached).
func leaderPushEndpoint(r client.Reader, l Lease, port string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		var lease coordinationv1.Lease
		if err := r.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: l.Name}, &lease); err != nil {
			return "", fmt.Errorf("reading leader election Lease %s: %w", l, err)
		}
		holder := ""
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		switch holder {
		case "":
			return "", fmt.Errorf("no replica holds the Lease %s", l)
		case l.Identity:
			return "", fmt.Errorf("this replica holds the Lease %s but does not lead yet", l)
		}
		name, _, _ := strings.Cut(holder, "_")
		var pod corev1.Pod
		if err := r.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: name}, &pod); err != nil {
			return "", fmt.Errorf("the leader %q is not a pod of namespace %s: %w", holder, l.Namespace, err)
		}
		if pod.Status.PodIP == "" {
			return "", fmt.Errorf("the leader's pod %s/%s has no IP", l.Namespace, name)
		}
		return "http://" + net.JoinHostPort(pod.Status.PodIP, port), nil
	}
}
