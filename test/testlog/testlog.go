// Package testlog keeps the log of a controller a test runs in-process
// and prints it into the test's log only when the test failed, after the
// failure. Streamed into t.Log as it is written, a controller's log buries
// the line that says what went wrong under thousands of others, and CI
// shows the head of a failed test's output.
package testlog

import (
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Lines is how many of the last lines a Buffer keeps.
const Lines = 3000

// Buffer keeps the last Lines lines written to it. The zero value is ready
// to use; it is safe for concurrent writers.
type Buffer struct {
	mu      sync.Mutex
	lines   []string
	dropped int
	done    bool
}

// Write adds p (one or more lines) to the buffer; after Report it drops
// p: a controller stopped late writes nowhere.
func (b *Buffer) Write(p []byte) (int, error) {
	b.add("", p)
	return len(p), nil
}

// Prefixed is a writer into b that starts every line with prefix (one
// buffer for several instances of a controller, each named).
func (b *Buffer) Prefixed(prefix string) io.Writer { return prefixed{b, prefix} }

type prefixed struct {
	b      *Buffer
	prefix string
}

func (p prefixed) Write(data []byte) (int, error) {
	p.b.add(p.prefix, data)
	return len(data), nil
}

func (b *Buffer) add(prefix string, p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		b.lines = append(b.lines, prefix+line)
	}
	// Trim in bulk, not at every line.
	if n := len(b.lines) - Lines; n > Lines/2 {
		b.lines = slices.Delete(b.lines, 0, n)
		b.dropped += n
	}
}

// Report ends the buffer and, when t failed, prints the lines it kept into
// t's log, naming whose log it is and how many earlier lines were dropped.
func (b *Buffer) Report(t testing.TB, whose string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = true
	if !t.Failed() {
		return
	}
	if n := len(b.lines) - Lines; n > 0 {
		b.lines = b.lines[n:]
		b.dropped += n
	}
	t.Logf("log of the %s (%d earlier lines dropped):\n%s", whose, b.dropped, strings.Join(b.lines, "\n"))
}
