package analysis

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestSecretCredentials(t *testing.T) {
	for _, tc := range []struct {
		name   string
		secret SecretData
		want   string // the Authorization header: "Bearer <token>", "Basic <base64 of user:password>" or ""
		err    string
	}{
		{"none", nil, "", ""},
		{"bearer", SecretData{"token": []byte("tok-123\n")}, "Bearer tok-123", ""},
		{"basic", SecretData{"username": []byte("u"), "password": []byte("p")}, "Basic dTpw", ""},
		{"ca only", SecretData{"ca.crt": []byte("x")}, "", ""},
		{"both", SecretData{"token": []byte("t"), "username": []byte("u"), "password": []byte("p")}, "", "not both"},
		{"user without password", SecretData{"username": []byte("u")}, "", "go together"},
		{"empty token", SecretData{"token": []byte(" ")}, "", "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := credentials(tc.secret)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrSecret) {
					t.Fatalf("credentials() error = %v, want ErrSecret with %q", err, tc.err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("credentials() = %q, %v; want %q", string(got), err, tc.want)
			}
		})
	}
}

func TestBadCAIsNamedNotShown(t *testing.T) {
	_, err := newClient(clientOptions{target: "https://x", secret: SecretData{"ca.crt": []byte("not-a-pem-super-secret")}})
	if err == nil || strings.Contains(err.Error(), "super-secret") || !strings.Contains(err.Error(), `"ca.crt"`) {
		t.Fatalf("err = %v, want one naming ca.crt without its content", err)
	}
}

func TestSecretDataNeverPrints(t *testing.T) {
	s := SecretData{"token": []byte("tok-123")}
	q := Query{Secret: s}
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s", s, q, q, s)} {
		if strings.Contains(out, "tok-123") || strings.Contains(out, "116") { // 116 = 't' as a byte
			t.Fatalf("secret printed: %s", out)
		}
	}
}

// The client holds the credentials as a secretString, which prints as
// <secret>.
func TestClientNeverPrintsSecrets(t *testing.T) {
	for name, s := range map[string]SecretData{
		"bearer": {"token": []byte("tok-123")},
		"basic":  {"username": []byte("alice"), "password": []byte("hunter22")},
	} {
		hdr, err := requestHeaders(clientOptions{target: "https://x", secret: s, headers: map[string]string{"X-Scope": "a"}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c, err := newClient(clientOptions{target: "https://x", secret: s})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out := fmt.Sprintf("%v %+v %#v %v %+v", hdr, hdr, hdr, c, c.Transport)
		for _, v := range []string{"tok-123", "hunter22", "YWxpY2U6aHVudGVyMjI="} {
			if strings.Contains(out, v) {
				t.Fatalf("%s: client printed a secret value:\n%s", name, out)
			}
		}
	}
}

func TestRedact(t *testing.T) {
	s := SecretData{"username": []byte("alice"), "password": []byte("hunter22")}
	err := redact(errors.New("401: bad credentials hunter22 / Basic YWxpY2U6aHVudGVyMjI="), s)
	if strings.Contains(err.Error(), "hunter22") || strings.Contains(err.Error(), "YWxpY2U6aHVudGVyMjI=") {
		t.Fatalf("redact left a credential: %v", err)
	}
	orig := errors.New("plain")
	if redact(orig, s) != orig {
		t.Fatal("redact replaced an error without credentials")
	}
	_, key := clientCertPEM(t)
	err = redact(fmt.Errorf("server echoed %s back", key), SecretData{"tls.key": key})
	if strings.Contains(err.Error(), "PRIVATE KEY") {
		t.Fatalf("redact left the TLS key: %v", err)
	}
}
