package analysis

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestAuthorization(t *testing.T) {
	for _, tc := range []struct {
		name   string
		secret SecretData
		want   string
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
			got, err := authorization(tc.secret)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrSecret) {
					t.Fatalf("authorization() error = %v, want ErrSecret with %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("authorization() = %q, %v; want %q", got, err, tc.want)
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
}
