// Package shards tests several rollgate instances side by side on one real
// control plane (kwok), split by Flux's sharding label the way
// docs/sharding.md sets them up: a main instance with
// --watch-label-selector '!sharding.fluxcd.io/key' and one instance per
// shard with 'sharding.fluxcd.io/key in (<shard>)', each with its own
// leader election Lease and Git writer, all serving the admission
// webhooks behind one address. Balancer is that address; test/bench uses
// it too.
package shards

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Balancer stands for the chart's webhook Service: one address in
// front of every instance's webhook server, passing TLS through. By
// default it spreads connections over the instances; Pin sends every
// connection to one of them (and closes the open ones, which the API
// server keeps alive), so a test decides which instance answers.
type Balancer struct {
	ln       net.Listener
	mu       sync.Mutex
	backends map[string]int
	order    []string
	next     int
	pinned   string
	conns    map[net.Conn]bool
	served   map[string]int
}

// StartBalancer listens on a free loopback port until the test ends.
func StartBalancer(t testing.TB) *Balancer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &Balancer{ln: ln, backends: map[string]int{}, conns: map[net.Conn]bool{}, served: map[string]int{}}
	go b.serve()
	t.Cleanup(func() {
		ln.Close()
		b.closeAll()
	})
	return b
}

// URL is the address to register the webhooks with (--webhook-url).
func (b *Balancer) URL() string { return "https://" + b.ln.Addr().String() }

// Add puts the webhook server of instance name, on a loopback port,
// behind the balancer. Like a Service's endpoints, it should be added
// only once the instance is ready: AddWhenReady does that.
func (b *Balancer) Add(name string, port int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backends[name] = port
	b.order = append(b.order, name)
}

// AddWhenReady adds instance name once its probe address answers /readyz
// with 200 (webhook certificate loaded, webhook server started), as the
// chart's Service lists a pod only once its readiness probe passes.
// Before that, the API server's calls would meet a TLS handshake the
// instance cannot finish. exited reports an instance that stopped; it
// fails the test at once, as does an instance not ready within timeout.
func (b *Balancer) AddWhenReady(t testing.TB, name string, port int, probeAddr string, timeout time.Duration, exited func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !Ready(probeAddr) {
		if exited != nil {
			if err := exited(); err != nil {
				t.Fatalf("instance %s: %v", name, err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance %s: /readyz at %s not 200 after %s", name, probeAddr, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Add(name, port)
}

// Ready reports whether the probe address answers /readyz with 200.
func Ready(probeAddr string) bool {
	resp, err := http.Get("http://" + probeAddr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Pin sends every new connection to the instance name ("" spreads them)
// and closes the open ones.
func (b *Balancer) Pin(name string) {
	b.mu.Lock()
	b.pinned = name
	b.mu.Unlock()
	b.closeAll()
}

// Served returns how many connections went to name.
func (b *Balancer) Served(name string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.served[name]
}

func (b *Balancer) closeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := range b.conns {
		c.Close()
		delete(b.conns, c)
	}
}

func (b *Balancer) serve() {
	for {
		in, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		name := b.pinned
		if name == "" && len(b.order) > 0 {
			name = b.order[b.next%len(b.order)]
			b.next++
		}
		port, ok := b.backends[name]
		if ok {
			b.served[name]++
		}
		b.mu.Unlock()
		if !ok {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			in.Close()
			continue
		}
		b.mu.Lock()
		b.conns[in], b.conns[out] = true, true
		b.mu.Unlock()
		go func() {
			_, _ = io.Copy(out, in)
			out.Close()
		}()
		go func() {
			_, _ = io.Copy(in, out)
			in.Close()
			b.mu.Lock()
			delete(b.conns, in)
			delete(b.conns, out)
			b.mu.Unlock()
		}()
	}
}
