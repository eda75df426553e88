package gitserver

import (
	"bytes"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
)

// OpenPGPKeyPair returns a new OpenPGP key pair for name, both armored:
// the private key as a signingKeyRef Secret holds it, the public key as
// a commit's signature is verified with.
func OpenPGPKeyPair(t testing.TB, name string) (private []byte, public string) {
	t.Helper()
	e, err := openpgp.NewEntity(name, "", name+"@rollgate.invalid", nil)
	if err != nil {
		t.Fatal(err)
	}
	var priv, pub bytes.Buffer
	wp, err := armor.Encode(&priv, openpgp.PrivateKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SerializePrivate(wp, nil); err != nil {
		t.Fatal(err)
	}
	if err := wp.Close(); err != nil {
		t.Fatal(err)
	}
	wb, err := armor.Encode(&pub, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Serialize(wb); err != nil {
		t.Fatal(err)
	}
	if err := wb.Close(); err != nil {
		t.Fatal(err)
	}
	return priv.Bytes(), pub.String()
}
