package proc

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
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

// TestFreePortsNeverHandsOutAReservedPort: a port handed out stays
// reserved for the process, so neither a later call of the same process
// nor another process (the test packages run as separate processes) gets it
// while its child may still be about to bind it.
func TestFreePortsNeverHandsOutAReservedPort(t *testing.T) {
	dir := t.TempDir()
	from := freeBlock(t, 8)
	to := from + 8

	first, err := freePorts(5, from, to, dir)
	if err != nil {
		t.Fatal(err)
	}
	second, err := freePorts(3, from, to, dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range append(first, second...) {
		if seen[p] {
			t.Fatalf("port %d handed out twice: %v then %v", p, first, second)
		}
		seen[p] = true
	}
	if got, err := freePorts(1, from, to, dir); err == nil {
		t.Fatalf("a ninth port %v from a range of 8 all handed out", got)
	} else if !strings.Contains(err.Error(), "reserved") {
		t.Errorf("error %q does not say the ports are reserved", err)
	}

	// Another process: it reserves a fresh block, and this one must not
	// get any port of it while that process lives.
	other := t.TempDir()
	from = freeBlock(t, 3)
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), "ROLLGATE_HOLD_PORTS="+fmt.Sprintf("%s:%d:%d", other, from, from+3))
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = child.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "held ") {
		t.Fatalf("the other process did not reserve its ports: %q %v", line, err)
	}
	if got, err := freePorts(1, from, from+3, other); err == nil {
		t.Fatalf("got port %v, which another process holds (%s)", got, strings.TrimSpace(line))
	}
	stdin.Close()
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	if got, err := freePorts(3, from, from+3, other); err != nil {
		t.Fatalf("the other process exited, its reservations should be gone: %v", err)
	} else if len(got) != 3 {
		t.Fatalf("got %v", got)
	}
}

// TestMain runs the test binary as the other process of
// TestFreePortsNeverHandsOutAReservedPort when asked to: it reserves every
// port of the range it is given, says so, and holds them until its stdin
// closes.
func TestMain(m *testing.M) {
	spec := os.Getenv("ROLLGATE_HOLD_PORTS")
	if spec == "" {
		os.Exit(m.Run())
	}
	f := strings.Split(spec, ":")
	from, _ := strconv.Atoi(f[1])
	to, _ := strconv.Atoi(f[2])
	ports, err := freePorts(to-from, from, to, f[0])
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Printf("held %v\n", ports)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	os.Exit(0)
}

// freeBlock finds n consecutive bindable ports below the ephemeral range.
func freeBlock(t *testing.T, n int) int {
	t.Helper()
	for from := portsFrom + 7000; from+n < ephemeralLow(); from += n {
		ok := true
		for p := from; p < from+n && ok; p++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				ok = false
				continue
			}
			ln.Close()
		}
		if ok {
			return from
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
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
