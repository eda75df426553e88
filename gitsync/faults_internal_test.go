package gitsync

import (
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
)

// TestIsStorageError: damage of the local store is told apart from the
// network failing, even when the network error wraps io.EOF.
func TestIsStorageError(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{plumbing.ErrObjectNotFound, true},
		{fmt.Errorf("reading main: %w", plumbing.ErrObjectNotFound), true},
		{flate.CorruptInputError(9), true},
		{packfile.ErrZLib.AddDetails("bad"), true},
		{io.ErrUnexpectedEOF, true},
		{&url.Error{Op: "Get", URL: "http://x", Err: io.EOF}, false},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{ErrNonFastForward, false},
		{ErrAuth, false},
		{context.DeadlineExceeded, false},
		{ErrFileNotFound, false},
	}
	for _, c := range cases {
		if got := isStorageError(c.err); got != c.want {
			t.Errorf("isStorageError(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestDamageOnlyForOnDiskStores: an in-memory store is never dropped for
// a read error (it cannot rot; maybeReset bounds it).
func TestDamageOnlyForOnDiskStores(t *testing.T) {
	mem, err := Open(Options{URL: "https://git.example.com/app.git"})
	if err != nil {
		t.Fatal(err)
	}
	mem.noteDamage(plumbing.ErrObjectNotFound)
	if mem.damaged {
		t.Error("in-memory store marked damaged")
	}
	disk, err := Open(Options{URL: "https://git.example.com/app.git", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	disk.noteDamage(errors.New("remote hung up"))
	if disk.damaged {
		t.Error("an unrelated error marked the store damaged")
	}
	disk.noteDamage(plumbing.ErrObjectNotFound)
	if !disk.damaged {
		t.Fatal("a missing object did not mark the on-disk store damaged")
	}
	if err := disk.repair(); err != nil || disk.damaged {
		t.Fatalf("repair = %v, damaged %v", err, disk.damaged)
	}
}

// TestIsStatusFileFastPath: files as RenderStatus writes them are
// recognized without parsing; anything else is parsed.
func TestIsStatusFileFastPath(t *testing.T) {
	rendered, err := RenderStatus(RolloutState{Namespace: "demo", Name: "echo", Phase: "Healthy"})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		data string
		want bool
	}{
		"rendered":                {string(rendered), true},
		"hand-written, no header": {"apiVersion: " + StatusAPIVersion + "\nkind: " + StatusKind + "\nnamespace: a\nname: b\n", true},
		"our comment, other kind": {"# Progress of Rollout demo/echo, written by rollgate.\n# Do not edit: the controller overwrites this file.\napiVersion: apps/v1\nkind: Deployment\n", false},
		"a manifest":              {"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: echo\n", false},
		"header only, one line":   {"# Progress of Rollout demo/echo, written by rollgate.", false},
	} {
		if got := isStatusFile([]byte(c.data)); got != c.want {
			t.Errorf("%s: isStatusFile = %v, want %v", name, got, c.want)
		}
	}
}
