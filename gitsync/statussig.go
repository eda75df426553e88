package gitsync

import (
	"bytes"
	"errors"
	"fmt"
	"sort"

	"github.com/ProtonMail/go-crypto/openpgp"
)

// StatusSignatureExt is appended to a status file's path to name the
// detached OpenPGP signature beside it (<namespace>/<name>.yaml.asc), which
// a Writer with a FileSigner writes with every status file.
//
// A signature per file, rather than a signed commit, is what a fleet gate
// checks: the status branch is shared by every cluster, any of them can
// push the commit that last touched another's file (a coalesced or retried
// write, a collection, a person), and status may sit in the tracked branch
// where commits are merged and squashed. The file and its signature travel
// together whoever commits them; only the cluster's key makes them match.
const StatusSignatureExt = ".asc"

// Why a status file's signature does not count.
var (
	// ErrStatusUnsigned: no signature file beside the status file.
	ErrStatusUnsigned = errors.New("the status file carries no signature")
	// ErrStatusUnknownSigner: signed by a key that is not trusted.
	ErrStatusUnknownSigner = errors.New("the status file is signed by a key that is not trusted for its cluster")
	// ErrStatusBadSignature: the signature does not match the file (it was
	// changed after it was signed) or cannot be read.
	ErrStatusBadSignature = errors.New("the status file's signature does not match it")
	// ErrStatusSignerExpired: the key or the signature expired, or the
	// key was revoked.
	ErrStatusSignerExpired = errors.New("the status file is signed by an expired or revoked key")
)

// Keyring is a set of trusted OpenPGP public keys.
type Keyring struct {
	ring openpgp.EntityList
}

// NewKeyring reads the public keys in keys (the data of a Secret: every
// value an ASCII-armored keyring). An error names the Secret key that does
// not hold one.
func NewKeyring(keys map[string][]byte) (*Keyring, error) {
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	var ring openpgp.EntityList
	for _, k := range names {
		r, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(keys[k]))
		if err != nil || len(r) == 0 {
			return nil, fmt.Errorf("%w: key %q is not an ASCII-armored OpenPGP public key", ErrInvalidCredentials, k)
		}
		ring = append(ring, r...)
	}
	if len(ring) == 0 {
		return nil, fmt.Errorf("%w: the Secret holds no OpenPGP public key", ErrInvalidCredentials)
	}
	return &Keyring{ring: ring}, nil
}

// VerifyStatusFile checks the signature beside the status file at file in
// snap against k and returns the signer. The errors are ErrStatusUnsigned,
// ErrStatusUnknownSigner, ErrStatusSignerExpired and ErrStatusBadSignature.
func VerifyStatusFile(snap *Snapshot, file string, k *Keyring) (string, error) {
	data, err := snap.ReadFile(file)
	if err != nil {
		return "", err
	}
	sig, err := snap.ReadFile(file + StatusSignatureExt)
	if err != nil {
		if _, exists := snap.blobHash(file + StatusSignatureExt); !exists {
			return "", fmt.Errorf("%w (no %s)", ErrStatusUnsigned, file+StatusSignatureExt)
		}
		return "", err
	}
	e, err := openpgp.CheckArmoredDetachedSignature(k.ring, bytes.NewReader(data), bytes.NewReader(sig), nil)
	return signatureVerdict(e, err, ErrStatusUnknownSigner, ErrStatusSignerExpired, ErrStatusBadSignature)
}
