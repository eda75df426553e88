package gitsync

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/ProtonMail/go-crypto/openpgp"
)

// OpenPGPSigner signs commits with an OpenPGP private key (what `git
// commit -S` does with gpg). Pass it as Options.Signer.
type OpenPGPSigner struct {
	entity *openpgp.Entity
}

// NewOpenPGPSigner reads an ASCII-armored private key (as stored in a
// Secret, e.g. under "git.asc"), decrypting it with passphrase when it is
// encrypted. Errors never quote the key or the passphrase.
func NewOpenPGPSigner(armoredKey []byte, passphrase string) (*OpenPGPSigner, error) {
	ring, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(armoredKey))
	if err != nil || len(ring) == 0 {
		return nil, fmt.Errorf("%w: the signing key is not an armored OpenPGP key", ErrInvalidCredentials)
	}
	e := ring[0]
	if e.PrivateKey == nil {
		return nil, fmt.Errorf("%w: the signing key has no private part", ErrInvalidCredentials)
	}
	if e.PrivateKey.Encrypted {
		if passphrase == "" {
			return nil, fmt.Errorf("%w: the signing key is encrypted and no passphrase was given", ErrInvalidCredentials)
		}
		if err := e.DecryptPrivateKeys([]byte(passphrase)); err != nil {
			return nil, fmt.Errorf("%w: cannot decrypt the signing key", ErrInvalidCredentials)
		}
	}
	return &OpenPGPSigner{entity: e}, nil
}

// Sign returns an armored detached signature of message.
func (s *OpenPGPSigner) Sign(message io.Reader) ([]byte, error) {
	if s == nil || s.entity == nil {
		return nil, errors.New("no signing key")
	}
	var b bytes.Buffer
	if err := openpgp.ArmoredDetachSign(&b, s.entity, message, nil); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// String names the key by its fingerprint.
func (s *OpenPGPSigner) String() string {
	if s == nil || s.entity == nil {
		return "no signing key"
	}
	return fmt.Sprintf("openpgp key %X", s.entity.PrimaryKey.Fingerprint)
}
