package gitsource

import (
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/reconciler/internal/rollouttest"
)

// TestTheEpochIsReadFromTheLeaseThisProcessHolds: the status writers'
// fencing epoch grows with the Lease's spec.leaseTransitions and with its
// creation time (a Lease created again starts its transitions from 0),
// read from the API server, and only while this process's identity holds
// the Lease.
func TestTheEpochIsReadFromTheLeaseThisProcessHolds(t *testing.T) {
	ctx, _, c, _ := rollouttest.StartAPIServer(t)
	const ns = "rollgate-system"
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	created := map[string]int64{}
	lease := func(name, holder string, transitions *int32) Lease {
		obj := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15), LeaseTransitions: transitions}}
		rollouttest.MustCreate(t, c, obj)
		created[name] = obj.CreationTimestamp.Unix()
		return Lease{Namespace: ns, Name: name, Identity: "pod-a_1234"}
	}
	base := func(name string) uint64 { return uint64(created[name]) * epochsPerLease }

	mine := lease("rollgate.dev", "pod-a_1234", ptr.To[int32](4))
	if epoch, err := leaseEpoch(ctx, c, mine); err != nil || epoch != base("rollgate.dev")+5 {
		t.Fatalf("epoch of a Lease held with 4 transitions = %d, %v; want its creation second x 1e6 + 5", epoch, err)
	}
	// The first holder of a new Lease (no transitions yet) still fences.
	first := lease("first", "pod-a_1234", nil)
	if epoch, err := leaseEpoch(ctx, c, first); err != nil || epoch != base("first")+1 {
		t.Fatalf("epoch of a new Lease = %d, %v; want its creation second x 1e6 + 1", epoch, err)
	}
	// A Lease deleted and created again (a reinstall) starts its
	// transitions from 0, and its first leader still outranks every
	// leader of the Lease before it.
	old := lease("again", "pod-a_1234", ptr.To[int32](41))
	before, err := leaseEpoch(ctx, c, old)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "again"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // creation times have second precision
	again := lease("again", "pod-a_1234", nil)
	if after, err := leaseEpoch(ctx, c, again); err != nil || after <= before {
		t.Fatalf("epoch of the re-created Lease = %d, %v; want more than %d, the epoch of the Lease before it at 41 transitions", after, err, before)
	}

	theirs := lease("theirs", "pod-b_5678", ptr.To[int32](7))
	if epoch, err := leaseEpoch(ctx, c, theirs); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("epoch of a Lease held by another identity = %d, %v; want ErrNotLeader", epoch, err)
	}
	if _, err := leaseEpoch(ctx, c, Lease{Namespace: ns, Name: "missing", Identity: "pod-a_1234"}); err == nil {
		t.Fatal("a missing Lease gave an epoch")
	}

	// The pool reads it once and hands it to every writer it opens.
	g := NewPool(c, Options{Lease: &mine})
	f, err := g.fence(ctx)
	if err != nil || f.Epoch != base("rollgate.dev")+5 || f.Lease != ns+"/rollgate.dev" || f.Holder != "pod-a_1234" {
		t.Fatalf("pool fence = %+v, %v", f, err)
	}
	// Without leader election there is no epoch and no fence.
	if f, err := NewPool(c, Options{}).fence(ctx); err != nil || f.Epoch != 0 {
		t.Fatalf("fence without a Lease = %+v, %v; want epoch 0", f, err)
	}
	if _, err := NewPool(c, Options{Lease: &theirs}).fence(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("fence of a Lease held by another identity: %v, want ErrNotLeader", err)
	}
}

// TestThePushEndpointOfTheLeaderIsItsPod: a replica that does not lead
// finds the leader's push endpoint from the Lease: the pod named by the
// holder's identity ("<pod>_<uuid>") in the Lease's namespace, its IP and
// this replica's port. No holder, this replica itself, a holder that is
// no pod, and a pod without an IP are errors naming what is missing.
func TestThePushEndpointOfTheLeaderIsItsPod(t *testing.T) {
	ctx, _, c, _ := rollouttest.StartAPIServer(t)
	const ns = "rollgate-system"
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	holder := func(id string) {
		t.Helper()
		var l coordinationv1.Lease
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "rollgate.dev"}, &l)
		if apierrors.IsNotFound(err) {
			rollouttest.MustCreate(t, c, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rollgate.dev"},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(id)}})
			return
		}
		l.Spec.HolderIdentity = ptr.To(id)
		if err := c.Update(ctx, &l); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(name, ip string) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: "rollgate"}}}}
		rollouttest.MustCreate(t, c, p)
		if ip != "" {
			p.Status.PodIP = ip
			if err := c.Status().Update(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	leader := leaderPushEndpoint(c, Lease{Namespace: ns, Name: "rollgate.dev", Identity: "rollgate-7d9f-b_5678"}, "9292")
	want := func(what, url, errText string) {
		t.Helper()
		got, err := leader(ctx)
		if errText == "" && (err != nil || got != url) {
			t.Fatalf("%s: %q, %v; want %q", what, got, err, url)
		}
		if errText != "" && (err == nil || !strings.Contains(err.Error(), errText)) {
			t.Fatalf("%s: %q, %v; want an error saying %q", what, got, err, errText)
		}
	}
	want("no Lease", "", "reading leader election Lease rollgate-system/rollgate.dev")
	holder("")
	want("a Lease nobody holds", "", "no replica holds the Lease")
	holder("rollgate-7d9f-b_5678")
	want("this replica holds the Lease", "", "does not lead yet")
	holder("rollgate-7d9f-a_1234")
	want("a holder that is no pod", "", `the leader "rollgate-7d9f-a_1234" is not a pod of namespace rollgate-system`)
	pod("rollgate-7d9f-a", "")
	want("a pod without an IP", "", "has no IP")
	pod("rollgate-7d9f-c", "10.244.0.17")
	holder("rollgate-7d9f-c_9abc")
	want("the leader's pod", "http://10.244.0.17:9292", "")
}
