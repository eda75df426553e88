package webhook

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Certs is the webhook's certificate material, PEM encoded, as kept in the
// Secret: a self-signed CA, the serving certificate it signed, and the
// previous CA (still trusted in the CA bundle until it expires, so a
// replica serving an older certificate keeps working during a rotation).
type Certs struct {
	CACert, CAKey  []byte
	Cert, Key      []byte
	PreviousCACert []byte
	// CARotatedAt is when CACert was made; a serving certificate of the new
	// CA is only issued a grace period later, once API servers trust it.
	CARotatedAt time.Time
}

// Bundle returns the CA bundle to put in webhook configurations: the CA,
// and the previous CA while it is valid at now.
func (c *Certs) Bundle(now time.Time) []byte {
	out := append([]byte(nil), c.CACert...)
	if prev, err := parseCert(c.PreviousCACert); err == nil && now.Before(prev.NotAfter) && !bytes.Equal(c.PreviousCACert, c.CACert) {
		out = append(out, c.PreviousCACert...)
	}
	return out
}

// Rotation decides when certificates are renewed.
type Rotation struct {
	// Validity of new certificates (CA and serving); default one year.
	Validity time.Duration
	// Grace between adding a new CA to the bundle and serving a
	// certificate it signed; default 5 minutes.
	Grace time.Duration
}

func (r Rotation) withDefaults() Rotation {
	if r.Validity <= 0 {
		r.Validity = 365 * 24 * time.Hour
	}
	if r.Grace <= 0 {
		r.Grace = 5 * time.Minute
	}
	return r
}

// Next returns the certificates to use at now for hosts (DNS names or IP
// addresses), and whether they differ from cur (nil: none yet). A
// certificate is renewed at two thirds of its life or when it does not
// cover hosts. A new CA goes into the bundle first; the serving
// certificate moves to it after the grace period, unless the current one
// can no longer be served at all.
func (r Rotation) Next(cur *Certs, hosts []string, now time.Time) (*Certs, bool, error) {
	r = r.withDefaults()
	next := &Certs{}
	if cur != nil {
		*next = *cur
	}
	changed := false
	ca, caKey, err := parseCA(next)
	if err != nil || renewDue(ca, now) {
		if ca != nil && now.Before(ca.NotAfter) {
			next.PreviousCACert = next.CACert
		}
		if next.CACert, next.CAKey, err = newCA(now, r.Validity); err != nil {
			return nil, false, err
		}
		next.CARotatedAt, changed = now, true
		if ca, caKey, err = parseCA(next); err != nil {
			return nil, false, err
		}
	}
	leaf, trusted := servingState(next, hosts, now)
	ownCA := leaf != nil && leaf.CheckSignatureFrom(ca) == nil
	graceOver := !now.Before(next.CARotatedAt.Add(r.Grace))
	switch {
	case !trusted, // missing, expired, wrong hosts or signed by no bundled CA
		renewDue(leaf, now) && (ownCA || graceOver),
		!ownCA && graceOver:
		if next.Cert, next.Key, err = newServing(ca, caKey, hosts, now, r.Validity); err != nil {
			return nil, false, err
		}
		changed = true
	}
	return next, changed, nil
}

// servingState parses the serving certificate and says whether it can be
// served at now: it covers hosts, is valid and is signed by a CA of the
// bundle.
func servingState(c *Certs, hosts []string, now time.Time) (*x509.Certificate, bool) {
	leaf, err := parseCert(c.Cert)
	if err != nil {
		return nil, false
	}
	if _, err := keyPair(c.Cert, c.Key); err != nil || now.Before(leaf.NotBefore) || !now.Before(leaf.NotAfter) {
		return leaf, false
	}
	for _, h := range hosts {
		if leaf.VerifyHostname(h) != nil {
			return leaf, false
		}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.Bundle(now)) {
		return leaf, false
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return leaf, err == nil
}

// renewDue reports whether cert has used two thirds of its life at now.
func renewDue(cert *x509.Certificate, now time.Time) bool {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return !now.Before(cert.NotBefore.Add(life * 2 / 3))
}

func parseCA(c *Certs) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	ca, err := parseCert(c.CACert)
	if err != nil {
		return nil, nil, err
	}
	block, _ := pem.Decode(c.CAKey)
	if block == nil {
		return ca, nil, errors.New("CA key: no PEM block")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return ca, nil, fmt.Errorf("CA key: %w", err)
	}
	if !ca.IsCA {
		return ca, nil, errors.New("CA certificate is not a CA")
	}
	return ca, key, nil
}

func parseCert(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// newCA makes a self-signed CA valid from an hour before now (clock skew).
func newCA(now time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("rollgate-webhook-ca@%d", now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	return sign(tmpl, tmpl, &key.PublicKey, key, key)
}

// newServing makes a serving certificate for hosts signed by ca.
func newServing(ca *x509.Certificate, caKey *ecdsa.PrivateKey, hosts []string, now time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return sign(tmpl, ca, &key.PublicKey, caKey, key)
}

func sign(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer, key *ecdsa.PrivateKey) ([]byte, []byte, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
