package luascripts

import (
	"encoding/json"
	"maps"

	"k8s.io/utils/lru"
)

// Memo keeps the results of the latest successful runs of Ingress
// scripts, by script and input. A script's result depends on its input
// alone (the sandbox has no clock, no random numbers and no I/O), and the
// Ingress router asks the same question at every reconcile of a step
// (the same annotations, weight and matches), so a Runner with a Memo
// answers a repeated question without running the script again.
//
// It holds at most memoSize results, the least recently used going
// first. A result it gives is not a run: Runner.Observe and Runner.Print
// hear nothing of it (a Runner with Print set does not use its Memo).
// Errors are not kept: a failing step runs its script each time, and
// says why each time.
type Memo struct {
	cache *lru.Cache
}

// memoSize bounds a Memo: one result per Ingress route of a release in
// progress is what it needs.
const memoSize = 1024

// memoMaxInput bounds what a Memo keeps of one question: an input (the
// canary Ingress's annotations, the step's matches) whose key is longer is
// not kept, and its script runs every time. A result is the input's
// annotations and the script's few, so a Memo holds at most about
// memoSize × 2 × memoMaxInput (32 MiB); an Ingress with three
// annotations takes about 1 KiB a question (260 bytes of JSON in its key), 1 MiB in all.
const memoMaxInput = 16 << 10

// NewMemo returns an empty Memo.
func NewMemo() *Memo {
	return &Memo{cache: lru.New(memoSize)}
}

// memoKey names a question: the script by the hash of its source, the
// limits it runs under, and its input as JSON.
type memoKey struct {
	script [32]byte
	limits Limits
	input  string
}

// ingressKey is the key of a run of s on in under lim.
func ingressKey(s Script, in IngressInput, lim Limits) (memoKey, bool) {
	b, err := json.Marshal(in)
	if err != nil || len(b) > memoMaxInput {
		return memoKey{}, false
	}
	return memoKey{script: s.sum, limits: lim, input: string(b)}, true
}

// ingress returns the result kept for key, a copy the caller may change.
func (m *Memo) ingress(key memoKey) (map[string]string, bool) {
	v, ok := m.cache.Get(key)
	if !ok {
		return nil, false
	}
	return maps.Clone(v.(map[string]string)), true
}

// keepIngress keeps a copy of out for key.
func (m *Memo) keepIngress(key memoKey, out map[string]string) {
	m.cache.Add(key, maps.Clone(out))
}
