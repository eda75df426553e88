package gitsync

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"strings"

	"sigs.k8s.io/yaml"
)

// ErrFenced means a status flush was refused because the status tree
// holds a higher leadership epoch than the Writer's: another replica
// leads now, and this one must write nothing more.
var ErrFenced = errors.New("fenced: another replica leads")

// LeaderKind is the kind of the leader file (see Fence).
const LeaderKind = "LeaderEpoch"

// Fence is the leadership a Writer writes under. Epoch is a fencing
// token: it grows with every change of leader (the controller derives it
// from its Lease's spec.leaseTransitions). Every flush writes it into
// the leader file of Lease, "leader.<namespace>.<name>.yaml" under the
// Writer's PathPrefix, and a flush whose base holds a higher epoch there
// writes nothing and fails with ErrFenced. The push is a compare-and-swap
// of the branch, so the check and the write are one step. The zero Fence
// (Epoch 0) fences nothing and writes no leader file: a single replica.
type Fence struct {
	// Epoch is this process's epoch; 0 turns fencing off.
	Epoch uint64
	// Lease is the Lease the epoch comes from, "<namespace>/<name>". Each
	// Lease has its own file, so shards (one Lease each) writing under one
	// directory do not fence each other. Required when Epoch > 0.
	Lease string
	// Holder is this process's identity in the Lease, written for people
	// reading the file.
	Holder string
}

// leaderDoc is the leader file.
type leaderDoc struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Lease      string `json:"lease"`
	Epoch      uint64 `json:"epoch"`
	Holder     string `json:"holder,omitempty"`
}

// LeaderPath returns the path of the leader file of lease
// ("<namespace>/<name>") under prefix. Its name has dots, so it is never a
// namespace directory, and it sits beside them, so no reader of status
// files ("<namespace>/<name>.yaml") takes it for one.
func LeaderPath(prefix, lease string) string {
	return path.Join(prefix, "leader."+strings.ReplaceAll(lease, "/", ".")+".yaml")
}

// renderLeader returns the leader file of f.
func renderLeader(f Fence) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Leadership epoch of the rollgate controller holding Lease %s.\n", f.Lease)
	b.WriteString("# Do not edit: a controller with a lower epoch writes nothing here.\n")
	js, _ := yaml.Marshal(leaderDoc{APIVersion: StatusAPIVersion, Kind: LeaderKind, Lease: f.Lease, Epoch: f.Epoch, Holder: f.Holder})
	b.Write(js)
	return b.Bytes()
}

// ParseLeaderEpoch returns the epoch a leader file holds.
func ParseLeaderEpoch(data []byte) (uint64, error) {
	var doc leaderDoc
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrInvalidManifest, err)
	}
	if doc.APIVersion != StatusAPIVersion || doc.Kind != LeaderKind {
		return 0, fmt.Errorf("%w: not a %s %s", ErrInvalidManifest, StatusAPIVersion, LeaderKind)
	}
	return doc.Epoch, nil
}

// fenceCheck compares the Writer's epoch with the one base holds. It
// returns the leader file to write (nil when base holds the Writer's
// epoch already, or fencing is off), or ErrFenced when base holds a
// higher epoch.
func (w *Writer) fenceCheck(base *Snapshot) (string, []byte, error) {
	f := w.opts.Fence
	if f.Epoch == 0 {
		return "", nil, nil
	}
	p := LeaderPath(w.opts.PathPrefix, f.Lease)
	old, err := base.ReadFile(p)
	switch {
	case errors.Is(err, ErrFileNotFound):
		return p, renderLeader(f), nil
	case err != nil:
		return "", nil, err
	}
	held, err := ParseLeaderEpoch(old)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w (delete the file to let the leader write it again)", p, err)
	}
	switch {
	case held > f.Epoch:
		return "", nil, fmt.Errorf("%w: %s on %s holds epoch %d of Lease %s, this replica's is %d; it writes no more status",
			ErrFenced, p, w.opts.Branch, held, f.Lease, f.Epoch)
	case held == f.Epoch:
		return "", nil, nil
	}
	return p, renderLeader(f), nil
}

// epochHash is the blob hash of base's leader file of the Writer's
// Lease (zero when fencing is off or there is none): a push that lost a
// race is rebuilt when another writer changed it.
func (w *Writer) epochHash(base *Snapshot) string {
	if w.opts.Fence.Epoch == 0 {
		return ""
	}
	h, ok := base.blobHash(LeaderPath(w.opts.PathPrefix, w.opts.Fence.Lease))
	if !ok {
		return ""
	}
	return h.String()
}
