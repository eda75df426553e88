package gitpush

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// Headers the forges sign their webhook calls with.
const (
	// HeaderGitHub is GitHub's (and Gitea's, Forgejo's) HMAC-SHA256 of
	// the body: "sha256=<hex>".
	HeaderGitHub = "X-Hub-Signature-256"
	// HeaderGitea is Gitea's HMAC-SHA256 of the body: "<hex>".
	HeaderGitea = "X-Gitea-Signature"
	// HeaderForgejo is Forgejo's HMAC-SHA256 of the body: "<hex>".
	HeaderForgejo = "X-Forgejo-Signature"
	// HeaderGitLab is GitLab's secret token, sent as it is.
	HeaderGitLab = "X-Gitlab-Token"
)

// readBody reads the body of req, at most MaxBody bytes (an
// *http.MaxBytesError beyond).
func readBody(w http.ResponseWriter, req *http.Request) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, req.Body, MaxBody))
}

// webhookSecret is the name of the Secret that authenticates calls for
// repo, "" when none does.
func webhookSecret(repo *v1alpha1.Repository) string {
	if w := repo.Spec.Webhook; w != nil && w.SecretRef != nil {
		return w.SecretRef.Name
	}
	return ""
}

// token reads the key `token` of the Secret name in namespace.
func (s *Server) token(ctx context.Context, namespace, name string) ([]byte, error) {
	if s.Secrets == nil {
		return nil, fmt.Errorf("no reader for Secret %s/%s", namespace, name)
	}
	var sec corev1.Secret
	if err := s.Secrets.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &sec); err != nil {
		return nil, fmt.Errorf("getting the webhook Secret: %w", err)
	}
	token := sec.Data["token"]
	if len(token) == 0 {
		return nil, fmt.Errorf("Secret %s/%s has no key token", namespace, name)
	}
	return token, nil
}

// verify reports whether h carries a valid proof of token for body: an
// HMAC-SHA256 of body in any of the signature headers, or token itself in
// GitLab's. Every comparison takes constant time.
func verify(h http.Header, body, token []byte) bool {
	mac := hmac.New(sha256.New, token)
	mac.Write(body)
	want := mac.Sum(nil)
	ok := false
	if v := h.Get(HeaderGitHub); v != "" {
		if hexSig, found := strings.CutPrefix(v, "sha256="); found {
			ok = equalHex(hexSig, want) || ok
		}
	}
	for _, name := range []string{HeaderGitea, HeaderForgejo} {
		if v := h.Get(name); v != "" {
			ok = equalHex(v, want) || ok
		}
	}
	if v := h.Get(HeaderGitLab); v != "" {
		// Hashed first so that the compare leaks not even the length.
		got, exp := sha256.Sum256([]byte(v)), sha256.Sum256(token)
		ok = hmac.Equal(got[:], exp[:]) || ok
	}
	return ok
}

// equalHex reports whether the hex string s encodes want.
func equalHex(s string, want []byte) bool {
	got, err := hex.DecodeString(strings.TrimSpace(s))
	return err == nil && hmac.Equal(got, want)
}
