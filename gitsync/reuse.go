package gitsync

import (
	"path"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// A status push that lost the race is put on the new head without being
// built again when the other writer left alone what Writer.build reads:
// the status files and the overview.

// sameStatusFiles reports whether two trees of the status directory hold
// the same status files ("<namespace>/<name>.yaml") and overview: what
// Writer.build reads of its base. Other files may differ. A directory
// that cannot be read counts as different.
func sameStatusFiles(old, cur *object.Tree) bool {
	if old == nil || cur == nil {
		return old == cur
	}
	if old.Hash == cur.Hash {
		return true
	}
	oldEntries, curEntries := entryMap(old), entryMap(cur)
	for name := range unionKeys(oldEntries, curEntries) {
		a, inOld := oldEntries[name]
		b, inCur := curEntries[name]
		if inOld && inCur && a == b {
			continue
		}
		if name == OverviewFile {
			return false
		}
		if a.Mode != filemode.Dir && b.Mode != filemode.Dir {
			continue // a file next to the namespaces: not a status file
		}
		if !sameYAML(subtreeOf(old, a), subtreeOf(cur, b)) {
			return false
		}
	}
	return true
}

// sameYAML reports whether two namespace directories hold the same .yaml
// entries; nil is an empty directory, and so is one that cannot be read,
// which subtreeOf reports as errTree.
func sameYAML(old, cur *object.Tree) bool {
	if old == errTree || cur == errTree {
		return false
	}
	yaml := func(t *object.Tree) map[string]object.TreeEntry {
		out := map[string]object.TreeEntry{}
		if t != nil {
			for _, e := range t.Entries {
				if path.Ext(e.Name) == ".yaml" {
					out[e.Name] = e
				}
			}
		}
		return out
	}
	o, c := yaml(old), yaml(cur)
	if len(o) != len(c) {
		return false
	}
	for name, e := range o {
		if c[name] != e {
			return false
		}
	}
	return true
}

// errTree stands for a directory that could not be read.
var errTree = &object.Tree{}

// subtreeOf returns the directory e of t, nil when e is not a directory
// (or the zero entry), errTree when it cannot be read.
func subtreeOf(t *object.Tree, e object.TreeEntry) *object.Tree {
	if e.Mode != filemode.Dir {
		return nil
	}
	sub, err := t.Tree(e.Name)
	if err != nil {
		return errTree
	}
	return sub
}

func entryMap(t *object.Tree) map[string]object.TreeEntry {
	out := make(map[string]object.TreeEntry, len(t.Entries))
	for _, e := range t.Entries {
		out[e.Name] = e
	}
	return out
}

func unionKeys(a, b map[string]object.TreeEntry) map[string]bool {
	out := make(map[string]bool, len(a)+len(b))
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}
