package proc

import (
	"fmt"
	"net"
	"testing"
)

func TestFreePortsAreDistinctBindableAndOutsideTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	ports, err := FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d handed out twice in %v", p, ports)
		}
		seen[p] = true
		if p < portsFrom || p >= low {
			t.Errorf("port %d outside [%d, %d): the kernel may give it to an outgoing connection", p, portsFrom, low)
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d was handed out but cannot be bound: %v", p, err)
		}
		ln.Close()
	}
}

// TestContextEndsAtTheTestsDeadline: under go test (whose -timeout gives
// every test a deadline) the context ends when the test must; a caller
// without a deadline gets a context that only cancel ends.
func TestContextEndsAtTheTestsDeadline(t *testing.T) {
	want, ok := t.Deadline()
	if !ok {
		t.Skip("go test -timeout 0: no deadline to follow")
	}
	ctx, cancel := TestContext(t)
	if got, ok := ctx.Deadline(); !ok || !got.Equal(want) {
		t.Errorf("context deadline %v (%v), want the test's %v", got, ok, want)
	}
	cancel()
	if ctx.Err() == nil {
		t.Error("cancel did not end the context")
	}
	ctx, cancel = TestContext(struct{}{})
	defer cancel()
	if d, ok := ctx.Deadline(); ok {
		t.Errorf("context of a caller without a deadline ends at %v", d)
	}
}
