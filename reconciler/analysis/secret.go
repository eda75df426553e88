package analysis

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Secret keys read from a metric's secretRef.
const (
	// SecretToken is a bearer token.
	SecretToken = "token"
	// SecretUsername and SecretPassword are basic-auth credentials.
	SecretUsername = "username"
	// SecretPassword goes with SecretUsername.
	SecretPassword = "password"
	// SecretCA is a PEM bundle of CA certificates trusted for TLS, in
	// addition to the system roots.
	SecretCA = "ca.crt"
	// SecretCert is a PEM client certificate for mutual TLS; it goes with
	// SecretKey.
	SecretCert = "tls.crt"
	// SecretKey is the PEM private key of SecretCert.
	SecretKey = "tls.key"
)

// SecretData is the data of a Secret. It prints as "[redacted]" so that it
// cannot leak through a log line or %v.
type SecretData map[string][]byte

// String hides the contents.
func (SecretData) String() string { return "[redacted]" }

// GoString hides the contents.
func (SecretData) GoString() string { return "[redacted]" }

// ErrSecret marks a Secret that cannot be used as metric credentials.
var ErrSecret = errors.New("unusable metric secret")

// credentials is the Authorization header value of s: its bearer token or
// its basic-auth pair, or "" when it has neither.
func credentials(s SecretData) (secretString, error) {
	token, hasToken := s[SecretToken]
	user, hasUser := s[SecretUsername]
	pass, hasPass := s[SecretPassword]
	switch {
	case hasToken && hasUser:
		return "", fmt.Errorf("%w: set %q or %q, not both", ErrSecret, SecretToken, SecretUsername)
	case hasToken:
		t := strings.TrimSpace(string(token))
		if t == "" {
			return "", fmt.Errorf("%w: key %q is empty", ErrSecret, SecretToken)
		}
		return secretString("Bearer " + t), nil
	case hasUser != hasPass:
		return "", fmt.Errorf("%w: %q and %q go together", ErrSecret, SecretUsername, SecretPassword)
	case hasUser:
		pair := base64.StdEncoding.EncodeToString([]byte(string(user) + ":" + string(pass)))
		return secretString("Basic " + pair), nil
	}
	return "", nil
}

// applyTLS trusts the CA bundle of s besides the system roots and sets
// its client certificate on tc, after checking that they parse, so that an
// error names the Secret key at fault (and never shows its content).
func applyTLS(tc *tls.Config, s SecretData) error {
	if ca, ok := s[SecretCA]; ok {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !x509.NewCertPool().AppendCertsFromPEM(ca) {
			return fmt.Errorf("%w: key %q holds no PEM certificate", ErrSecret, SecretCA)
		}
		pool.AppendCertsFromPEM(ca)
		tc.RootCAs = pool
	}
	cert, hasCert := s[SecretCert]
	key, hasKey := s[SecretKey]
	switch {
	case hasCert && !hasKey:
		return fmt.Errorf("%w: key %q is set without %q: mutual TLS needs both", ErrSecret, SecretCert, SecretKey)
	case hasKey && !hasCert:
		return fmt.Errorf("%w: key %q is set without %q: mutual TLS needs both", ErrSecret, SecretKey, SecretCert)
	case hasCert:
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			// crypto/tls errors describe the PEM blocks, never their bytes.
			return fmt.Errorf("%w: keys %q and %q are not a PEM certificate and its private key: %v", ErrSecret, SecretCert, SecretKey, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return nil
}

// redact replaces every credential from s found in err's text (the token,
// the password, the encoded basic-auth pair and the TLS private key) by
// "[redacted]". Errors carry what servers echo back; this keeps
// credentials out of status, events and logs whatever a server says.
func redact(err error, s SecretData) error {
	if err == nil || len(s) == 0 {
		return err
	}
	msg := err.Error()
	clean := msg
	for _, v := range sensitive(s) {
		clean = strings.ReplaceAll(clean, v, "[redacted]")
	}
	if clean == msg {
		return err
	}
	return errors.New(clean)
}

// sensitive lists the strings of s that must never be shown.
func sensitive(s SecretData) []string {
	var out []string
	for _, k := range []string{SecretToken, SecretPassword, SecretKey} {
		if v := strings.TrimSpace(string(s[k])); v != "" {
			out = append(out, v)
		}
	}
	if user, ok := s[SecretUsername]; ok && len(s[SecretPassword]) > 0 {
		out = append(out, base64.StdEncoding.EncodeToString([]byte(string(user)+":"+string(s[SecretPassword]))))
	}
	return out
}
