package analysis

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/common/config"
)

func TestSecretCredentials(t *testing.T) {
	for _, tc := range []struct {
		name   string
		secret SecretData
		want   string // "Bearer <token>", "Basic <user>:<password>" or ""
		err    string
	}{
		{"none", nil, "", ""},
		{"bearer", SecretData{"token": []byte("tok-123\n")}, "Bearer tok-123", ""},
		{"basic", SecretData{"username": []byte("u"), "password": []byte("p")}, "Basic u:p", ""},
		{"ca only", SecretData{"ca.crt": []byte("x")}, "", ""},
		{"both", SecretData{"token": []byte("t"), "username": []byte("u"), "password": []byte("p")}, "", "not both"},
		{"user without password", SecretData{"username": []byte("u")}, "", "go together"},
		{"empty token", SecretData{"token": []byte(" ")}, "", "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg config.HTTPClientConfig
			err := applyCredentials(&cfg, tc.secret)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrSecret) {
					t.Fatalf("applyCredentials() error = %v, want ErrSecret with %q", err, tc.err)
				}
				return
			}
			var got string
			switch {
			case cfg.Authorization != nil:
				got = cfg.Authorization.Type + " " + string(cfg.Authorization.Credentials)
			case cfg.BasicAuth != nil:
				got = "Basic " + cfg.BasicAuth.Username + ":" + string(cfg.BasicAuth.Password)
			}
			if err != nil || got != tc.want {
				t.Fatalf("applyCredentials() = %q, %v; want %q", got, err, tc.want)
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

// The client configuration holds the credentials as config.Secret, which
// prints as <secret>.
func TestClientConfigNeverPrintsSecrets(t *testing.T) {
	cert, key := clientCertPEM(t)
	for name, s := range map[string]SecretData{
		"bearer": {"token": []byte("tok-123"), "tls.crt": cert, "tls.key": key},
		"basic":  {"username": []byte("alice"), "password": []byte("hunter22")},
	} {
		cfg, _, err := httpClientConfig(clientOptions{target: "https://x", secret: s})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out := cfg.String() + fmt.Sprintf("%v %+v", cfg, cfg)
		for _, v := range []string{"tok-123", "hunter22", strings.TrimSpace(string(key))[40:80]} {
			if strings.Contains(out, v) {
				t.Fatalf("%s: config printed a secret value:\n%s", name, out)
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
