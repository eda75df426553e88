package gitsync

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// Commits are built directly in the object store: blobs, trees and the
// commit object are written without a worktree or index, so committing to a
// branch never checks anything out and works the same for orphan branches.

// cleanPath normalizes a repository path ("a/b.yaml"), rejecting paths that
// leave the repository or name the .git directory.
func cleanPath(p string) (string, error) {
	c := path.Clean(strings.TrimPrefix(p, "/"))
	if c == "." || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("invalid repository path %q", p)
	}
	for _, part := range strings.Split(c, "/") {
		if part == ".git" {
			return "", fmt.Errorf("invalid repository path %q", p)
		}
	}
	return c, nil
}

// writeBlob stores data as a blob and returns its hash.
func writeBlob(s storer.EncodedObjectStorer, data []byte) (plumbing.Hash, error) {
	obj := s.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	obj.SetSize(int64(len(data)))
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(data); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(obj)
}

// treeMemo remembers the directories buildTree wrote for one set of
// changes, by directory path and the hash of the directory it was built
// on: when the same changes are put on a new head (a retried push), a
// directory the other writer did not touch is taken as it is instead of
// being written again. It is valid for one set of changes and one object
// store only.
type treeMemo map[treeKey]builtTree

type treeKey struct {
	dir  string
	base plumbing.Hash
}

type builtTree struct {
	hash  plumbing.Hash
	empty bool
}

// buildTree returns the hash of base with changes applied. changes maps a
// clean path to new content; a nil value deletes the path. base may be nil
// (empty tree). Directories left empty disappear, as in Git. dir is the
// path of base ("" at the root); memo, when not nil, is read and filled
// for the directories below.
func buildTree(s storer.EncodedObjectStorer, base *object.Tree, changes map[string][]byte, dir string, memo treeMemo) (plumbing.Hash, bool, error) {
	entries := map[string]object.TreeEntry{}
	if base != nil {
		for _, e := range base.Entries {
			entries[e.Name] = e
		}
	}
	files := map[string][]byte{}
	sub := map[string]map[string][]byte{}
	for p, data := range changes {
		dir, rest, nested := strings.Cut(p, "/")
		if !nested {
			files[p] = data
			continue
		}
		if sub[dir] == nil {
			sub[dir] = map[string][]byte{}
		}
		sub[dir][rest] = data
	}
	for name, data := range files {
		if data == nil {
			delete(entries, name)
			continue
		}
		h, err := writeBlob(s, data)
		if err != nil {
			return plumbing.ZeroHash, false, err
		}
		entries[name] = object.TreeEntry{Name: name, Mode: filemode.Regular, Hash: h}
	}
	for name, dirChanges := range sub {
		key := treeKey{dir: path.Join(dir, name)}
		if e, ok := entries[name]; ok && e.Mode == filemode.Dir {
			key.base = e.Hash
		}
		built, ok := memo[key]
		if !ok {
			var child *object.Tree
			if key.base != plumbing.ZeroHash {
				t, err := object.GetTree(s, key.base)
				if err != nil {
					return plumbing.ZeroHash, false, err
				}
				child = t
			}
			h, empty, err := buildTree(s, child, dirChanges, key.dir, memo)
			if err != nil {
				return plumbing.ZeroHash, false, err
			}
			built = builtTree{hash: h, empty: empty}
			if memo != nil {
				memo[key] = built
			}
		}
		if built.empty {
			delete(entries, name)
			continue
		}
		entries[name] = object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: built.hash}
	}
	h, err := writeTree(s, entries)
	return h, len(entries) == 0, err
}

// writeTree stores a tree with entries in Git's canonical order (names
// compared as if directories ended in "/").
func writeTree(s storer.EncodedObjectStorer, entries map[string]object.TreeEntry) (plumbing.Hash, error) {
	t := &object.Tree{}
	for _, e := range entries {
		t.Entries = append(t.Entries, e)
	}
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	sort.Slice(t.Entries, func(i, j int) bool { return key(t.Entries[i]) < key(t.Entries[j]) })
	obj := s.NewEncodedObject()
	if err := t.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(obj)
}

// Signature names a commit author or committer.
type Signature struct {
	// Name is the display name, e.g. "rollgate".
	Name string
	// Email is the e-mail address, e.g. "rollgate@example.com".
	Email string
}

// Default commit author, used when none is configured.
const (
	DefaultAuthorName  = "rollgate"
	DefaultAuthorEmail = "rollgate@users.noreply.rollgate.dev"
)

// orDefault returns s, or the default author when s has no name.
func (s Signature) orDefault() Signature {
	if s.Name == "" {
		return Signature{Name: DefaultAuthorName, Email: DefaultAuthorEmail}
	}
	return s
}

// Signer signs commits (e.g. OpenPGP). It receives the encoded commit
// without signature and returns an armored detached signature.
type Signer interface {
	Sign(message io.Reader) ([]byte, error)
}

// writeCommit stores a commit object and returns its hash.
func writeCommit(s storer.EncodedObjectStorer, tree plumbing.Hash, parents []plumbing.Hash,
	author Signature, message string, when time.Time, signer Signer) (plumbing.Hash, error) {
	sig := object.Signature{Name: author.Name, Email: author.Email, When: when}
	c := &object.Commit{
		Author:       sig,
		Committer:    sig,
		Message:      message,
		TreeHash:     tree,
		ParentHashes: parents,
	}
	if signer != nil {
		unsigned := s.NewEncodedObject()
		if err := c.EncodeWithoutSignature(unsigned); err != nil {
			return plumbing.ZeroHash, err
		}
		r, err := unsigned.Reader()
		if err != nil {
			return plumbing.ZeroHash, err
		}
		signature, err := signer.Sign(r)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("signing commit: %w", err)
		}
		c.PGPSignature = string(signature)
	}
	obj := s.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(obj)
}

// readBlob returns the content of path in tree, or ErrFileNotFound.
func readBlob(t *object.Tree, p string) ([]byte, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: %s", ErrFileNotFound, p)
	}
	f, err := t.File(p)
	if errors.Is(err, object.ErrFileNotFound) {
		if e, ferr := t.FindEntry(p); ferr == nil && e.Mode.IsFile() {
			// The tree lists the file, but its blob is not in the store.
			return nil, fmt.Errorf("reading %s: %w", p, plumbing.ErrObjectNotFound)
		}
		return nil, fmt.Errorf("%w: %s", ErrFileNotFound, p)
	}
	if err != nil {
		return nil, err
	}
	r, err := f.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
