package gitsync

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/transport"
)

func TestRedactorText(t *testing.T) {
	r := newRedactor("s3cr/et@x", "tok")
	cases := map[string]string{
		"get http://u:s3cr/et@x@host/r.git: 401":     "get http://host/r.git: 401",
		"get https://user@host/r.git failed":         "get https://host/r.git failed",
		"pass s3cr/et@x and s3cr%2Fet%40x and tok!":  "pass [redacted] and [redacted] and [redacted]!",
		"basic dG9r header":                          "basic [redacted] header",
		"plain ssh://git@github.com/org/repo.git ok": "plain ssh://github.com/org/repo.git ok",
	}
	for in, want := range cases {
		if got := r.text(in); got != want {
			t.Errorf("text(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWrapClassifiesWithoutKeepingTheOriginal(t *testing.T) {
	r := newRedactor("hunter2")
	orig := fmt.Errorf("push http://me:hunter2@h/x: %w", transport.ErrAuthenticationRequired)
	err := r.wrap("pushing", orig)
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("secret in %q", err)
	}
	if !errors.Is(err, ErrAuth) || !errors.Is(err, transport.ErrAuthenticationRequired) {
		t.Fatalf("classification lost: %v", err)
	}
	for e := error(err); e != nil; e = errors.Unwrap(e) {
		if strings.Contains(e.Error(), "hunter2") {
			t.Fatalf("unwrapped chain leaks: %q", e)
		}
	}
	nff := r.wrap("", errors.New("non-fast-forward update: refs/heads/main"))
	if !errors.Is(nff, ErrNonFastForward) {
		t.Fatalf("not classified as non-fast-forward: %v", nff)
	}
}
