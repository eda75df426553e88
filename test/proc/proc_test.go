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
