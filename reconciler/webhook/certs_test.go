package webhook

import (
	"bytes"
	"crypto/x509"
	"testing"
	"time"
)

// verify fails the test unless c's serving certificate is trusted through
// c's bundle for every host at now.
func verify(t *testing.T, c *Certs, hosts []string, now time.Time) *x509.Certificate {
	t.Helper()
	leaf, err := parseCert(c.Cert)
	if err != nil {
		t.Fatalf("serving certificate: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.Bundle(now)) {
		t.Fatal("CA bundle holds no certificate")
	}
	for _, h := range hosts {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: pool, CurrentTime: now}); err != nil {
			t.Fatalf("serving certificate not trusted for %s at %s: %v", h, now.Format(time.DateOnly), err)
		}
	}
	if _, err := keyPair(c.Cert, c.Key); err != nil {
		t.Fatal(err)
	}
	return leaf
}

func TestRotation(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	year := 365 * 24 * time.Hour
	r := Rotation{Validity: year, Grace: 5 * time.Minute}
	hosts := []string{"rollgate-webhook.rollgate-system.svc", "rollgate-webhook.rollgate-system.svc.cluster.local"}

	step := func(cur *Certs, at time.Time, wantChanged bool) *Certs {
		t.Helper()
		next, changed, err := r.Next(cur, hosts, at)
		if err != nil {
			t.Fatal(err)
		}
		if changed != wantChanged {
			t.Fatalf("Next at %s: changed = %v, want %v", at.Format(time.DateTime), changed, wantChanged)
		}
		verify(t, next, hosts, at)
		return next
	}

	first := step(nil, start, true)
	if !first.CARotatedAt.Equal(start) || len(first.PreviousCACert) != 0 {
		t.Fatalf("first certificates: rotated at %v, previous CA %d bytes", first.CARotatedAt, len(first.PreviousCACert))
	}
	same := step(first, start.Add(200*24*time.Hour), false)

	// Two thirds of a year: a new CA joins the bundle, the old certificate
	// is still served until the grace period is over.
	due := start.Add(year * 2 / 3)
	rotated := step(same, due, true)
	if bytes.Equal(rotated.CACert, first.CACert) || !bytes.Equal(rotated.PreviousCACert, first.CACert) {
		t.Fatal("at two thirds of its life the CA was not replaced (with the old one kept as previous)")
	}
	if !bytes.Equal(rotated.Cert, first.Cert) {
		t.Fatal("the serving certificate moved to the new CA before the grace period")
	}
	if b := rotated.Bundle(due); !bytes.Contains(b, first.CACert) || !bytes.Contains(b, rotated.CACert) {
		t.Fatal("the bundle does not hold both CAs during the rotation")
	}
	step(rotated, due.Add(time.Minute), false)

	moved := step(rotated, due.Add(5*time.Minute), true)
	newCA, _ := parseCert(moved.CACert)
	leaf := verify(t, moved, hosts, due.Add(5*time.Minute))
	if leaf.CheckSignatureFrom(newCA) != nil {
		t.Fatal("after the grace period the serving certificate is not signed by the new CA")
	}
	step(moved, due.Add(time.Hour), false)

	// The previous CA leaves the bundle when it expires.
	if b := moved.Bundle(start.Add(year + time.Hour)); bytes.Contains(b, first.CACert) {
		t.Fatal("the expired previous CA is still in the bundle")
	}
}

func TestRotationRepairs(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	r := Rotation{}
	hosts := []string{"127.0.0.1", "localhost"}
	good, _, err := r.Next(nil, hosts, now)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, good, hosts, now)

	cases := map[string]struct {
		certs *Certs
		hosts []string
		at    time.Time
	}{
		"garbage":      {&Certs{CACert: []byte("x"), Cert: []byte("y")}, hosts, now},
		"new host":     {good, []string{"127.0.0.1", "localhost", "rollgate.example"}, now},
		"all expired":  {good, hosts, now.Add(2 * 365 * 24 * time.Hour)},
		"key mismatch": {&Certs{CACert: good.CACert, CAKey: good.CAKey, Cert: good.Cert, Key: []byte("-----")}, hosts, now},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			next, changed, err := r.Next(tc.certs, tc.hosts, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			if !changed {
				t.Fatal("unusable certificates were kept")
			}
			verify(t, next, tc.hosts, tc.at)
		})
	}
}
