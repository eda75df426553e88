package proc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// FreePorts returns n distinct ports that were free on 127.0.0.1, all held
// open together and then released for the children to bind, and reserved
// for this process until it exits.
//
// They are picked at random below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999 by default), where the kernel
// never puts the local end of an outgoing connection: a port from the
// ephemeral range (what listening on port 0 gives) can be taken by any
// connection the machine opens between its release and the child's bind,
// which happened with several clusters starting at once ("bind: address
// already in use" from etcd).
//
// Below that range the only other takers are the test packages themselves,
// which run as separate processes under `go test ./...` and all pick here:
// between one package's release of a port and its child's bind, another
// package could pick the same port and bind it first (etcd met an HTTP
// server of another package on its client port). So every port handed out
// is reserved with an flock on <tmp>/rollgate-ports/<port>, held by this
// process until it exits (the kernel then drops it, also when the process
// is killed); no other process, and no later call in this process, hands
// out a reserved port. The folder holds at most one empty file per port of
// the range (about 12,800).
func FreePorts(n int) ([]int, error) {
	return freePorts(n, portsFrom, ephemeralLow(), reservations())
}

func freePorts(n, from, to int, dir string) ([]int, error) {
	ports := make([]int, 0, n)
	tried := map[int]bool{}
	for len(ports) < n {
		if len(tried) == to-from {
			return nil, fmt.Errorf("no %d free ports on 127.0.0.1 between %d and %d: the others are bound or reserved by test processes (%s)", n, from, to, dir)
		}
		port := from + rand.IntN(to-from)
		if tried[port] {
			continue
		}
		tried[port] = true
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		defer ln.Close()
		ok, err := reserve(dir, port)
		if err != nil {
			return nil, err
		}
		if ok {
			ports = append(ports, port)
		}
	}
	return ports, nil
}

// held keeps the reservation files open, and so their locks, for the life
// of the process.
var held struct {
	sync.Mutex
	files []*os.File
}

// reserve takes the port's lock in dir, reporting false when another
// process or an earlier call of this one holds it (flock locks belong to
// the open file, so a second open in the same process is refused too).
func reserve(dir string, port int) (bool, error) {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return false, fmt.Errorf("port reservations: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return false, fmt.Errorf("port reservations: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return false, fmt.Errorf("port reservations: lock %s: %w", f.Name(), err)
	}
	held.Lock()
	held.files = append(held.files, f)
	held.Unlock()
	return true, nil
}

// reservations is the folder the test processes of this machine share
// their port reservations in.
func reservations() string {
	return filepath.Join(os.TempDir(), "rollgate-ports")
}

// portsFrom is the lowest port FreePorts hands out: above the well-known
// and most registered service ports.
const portsFrom = 20000

// ephemeralLow is the first port of the kernel's ephemeral range, or 32768
// where it cannot be read.
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low <= portsFrom+1000 {
		return 32768
	}
	return low
}
