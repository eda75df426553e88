package gitsync_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"

	"github.com/rollgate/rollgate/gitsync"
)

// private is the armored private key, as a signingKeyRef Secret holds it.
func (k testKey) private(t testing.TB) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := armor.Encode(&b, openpgp.PrivateKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.entity.SerializePrivate(w, nil); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return b.Bytes()
}

func keyring(t *testing.T, keys ...testKey) *gitsync.Keyring {
	t.Helper()
	data := map[string][]byte{}
	for i, k := range keys {
		data[string(rune('a'+i))+".asc"] = k.public(t)
	}
	r, err := gitsync.NewKeyring(data)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestStatusFilesSignedForFleetGates: a Writer with a FileSigner writes a
// signature beside every status file, which verifies with the cluster's
// public key only; a file changed by anyone else (another cluster can
// push to the shared branch), a file with no signature and a signature by
// another key do not verify; a removed file takes its signature along.
func TestStatusFilesSignedForFleetGates(t *testing.T) {
	stagingKey := newTestKey(t, "staging", time.Time{}, 0)
	prodKey := newTestKey(t, "prod", time.Time{}, 0)
	_, repo := newRepo(t, map[string]string{"apps/echo/rollout.yaml": "kind: Rollout\n"})
	signer, err := gitsync.NewOpenPGPSigner(stagingKey.private(t), "")
	if err != nil {
		t.Fatal(err)
	}
	staging := newWriter(t, repo, gitsync.WriterOptions{PathPrefix: "staging", CreateBranch: true, FileSigner: signer})
	prod := newWriter(t, repo, gitsync.WriterOptions{PathPrefix: "prod", CreateBranch: true})
	s := state("demo", "echo", 1)
	s.Phase, s.Stable.Images = "Healthy", []string{"echo=echo:2"}
	first := s
	staging.Enqueue(s)
	prod.Enqueue(s)
	for _, w := range []*gitsync.Writer{staging, prod} {
		if _, err := w.Flush(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	verify := func(file string, ring *gitsync.Keyring) error {
		t.Helper()
		snap, err := repo.Snapshot(ctx(t), gitsync.DefaultStatusBranch)
		if err != nil {
			t.Fatal(err)
		}
		_, err = gitsync.VerifyStatusFile(snap, file, ring)
		return err
	}
	if err := verify("staging/demo/echo.yaml", keyring(t, stagingKey)); err != nil {
		t.Fatalf("staging's own file with staging's key: %v", err)
	}
	if err := verify("staging/demo/echo.yaml", keyring(t, prodKey, stagingKey)); err != nil {
		t.Fatalf("with two keys in the ring (a rotation): %v", err)
	}
	if err := verify("staging/demo/echo.yaml", keyring(t, prodKey)); !errors.Is(err, gitsync.ErrStatusUnknownSigner) {
		t.Fatalf("staging's file with prod's key: %v, want ErrStatusUnknownSigner", err)
	}
	if err := verify("prod/demo/echo.yaml", keyring(t, prodKey)); !errors.Is(err, gitsync.ErrStatusUnsigned) {
		t.Fatalf("prod's unsigned file: %v, want ErrStatusUnsigned", err)
	}

	// Another writer of the branch rewrites staging's file: Healthy with
	// the images a gate downstream waits for.
	forge := func(file string, content []byte, sig []byte) {
		t.Helper()
		_, err := repo.Update(ctx(t), gitsync.UpdateRequest{Branch: gitsync.DefaultStatusBranch}, func(*gitsync.Snapshot) (*gitsync.Change, error) {
			files := map[string][]byte{file: content}
			if sig != nil {
				files[file+gitsync.StatusSignatureExt] = sig
			}
			return &gitsync.Change{Message: "forged", Files: files}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	forged := s
	forged.Stable.Images = []string{"echo=echo:3"}
	data, err := gitsync.RenderStatus(forged)
	if err != nil {
		t.Fatal(err)
	}
	forge("staging/demo/echo.yaml", data, nil)
	if err := verify("staging/demo/echo.yaml", keyring(t, stagingKey)); !errors.Is(err, gitsync.ErrStatusBadSignature) {
		t.Fatalf("staging's file changed by another writer: %v, want ErrStatusBadSignature", err)
	}
	sig, err := prodKey.sign(data)
	if err != nil {
		t.Fatal(err)
	}
	forge("staging/demo/echo.yaml", data, sig)
	if err := verify("staging/demo/echo.yaml", keyring(t, stagingKey)); !errors.Is(err, gitsync.ErrStatusUnknownSigner) {
		t.Fatalf("staging's file rewritten and signed with prod's key: %v, want ErrStatusUnknownSigner", err)
	}

	// Staging's next write restores its file and signature.
	s.Step.Current = 2
	staging.Enqueue(s)
	if _, err := staging.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := verify("staging/demo/echo.yaml", keyring(t, stagingKey)); err != nil {
		t.Fatalf("after staging's next write: %v", err)
	}

	// Signing turned on for a file already current: the signature alone
	// is written, once.
	signed := newWriter(t, repo, gitsync.WriterOptions{PathPrefix: "prod", CreateBranch: true, FileSigner: mustSigner(t, prodKey)})
	signed.Enqueue(first)
	res, err := signed.Flush(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Commit == "" {
		t.Fatal("no commit wrote prod's signature")
	}
	if err := verify("prod/demo/echo.yaml", keyring(t, prodKey)); err != nil {
		t.Fatalf("prod's file once prod signs: %v", err)
	}

	// A removed status file takes its signature along.
	staging.Remove("demo", "echo")
	if _, err := staging.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	snap, err := repo.Snapshot(ctx(t), gitsync.DefaultStatusBranch)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := snap.Files("staging")
	for _, f := range files {
		if strings.HasPrefix(f, "staging/demo/") {
			t.Fatalf("after Remove, %s is left on the branch (files %v)", f, files)
		}
	}
}

func mustSigner(t *testing.T, k testKey) *gitsync.OpenPGPSigner {
	t.Helper()
	s, err := gitsync.NewOpenPGPSigner(k.private(t), "")
	if err != nil {
		t.Fatal(err)
	}
	return s
}
