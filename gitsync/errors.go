package gitsync

import (
	"compress/flate"
	"compress/zlib"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/url"
	"regexp"
	"sort"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/format/objfile"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"
	"github.com/skeema/knownhosts"
)

// Sentinel errors. Errors returned by this package wrap at most a few of these
// (test with errors.Is); the message of a returned error never contains a
// credential.
var (
	// ErrAuth means the Git host rejected the credentials, or none were given
	// where some are required.
	ErrAuth = errors.New("git authentication failed")
	// ErrHostKey means the SSH host key of the Git host is not in known_hosts
	// or does not match it.
	ErrHostKey = errors.New("ssh host key verification failed")
	// ErrInvalidCredentials means the Secret data cannot be turned into
	// credentials for the repository URL (missing or malformed keys).
	ErrInvalidCredentials = errors.New("invalid git credentials")
	// ErrRepositoryNotFound means the remote repository does not exist (or is
	// hidden from these credentials).
	ErrRepositoryNotFound = errors.New("git repository not found")
	// ErrBranchNotFound means the branch does not exist on the remote.
	ErrBranchNotFound = errors.New("git branch not found")
	// ErrFileNotFound means the file does not exist at the branch head.
	ErrFileNotFound = errors.New("file not found in git")
	// ErrNonFastForward means a push was rejected because the remote branch
	// moved since it was fetched. Writes retry on it internally; it reaches
	// the caller only when every attempt was rejected.
	ErrNonFastForward = errors.New("git push rejected: remote branch moved")
	// ErrManifestNotFound means the manifest file holds no Rollout document
	// with the requested namespace and name.
	ErrManifestNotFound = errors.New("rollout manifest not found")
	// ErrInvalidManifest means a YAML file could not be parsed or edited.
	ErrInvalidManifest = errors.New("invalid manifest")
	// ErrNotOwned means the Writer would overwrite a file it did not write
	// (a manifest or README.md where a status file goes): a configuration
	// error, usually writing status into the tracked branch without a
	// PathPrefix.
	ErrNotOwned = errors.New("refusing to overwrite a file not written by rollgate")
)

// redactedText replaces every secret in error messages.
const redactedText = "[redacted]"

// userinfoRE matches the userinfo part of a URL ("scheme://user:pass@"),
// up to the last "@" of the token, so unescaped "/" or "@" in a password
// are covered too (at the price of over-redacting odd URLs).
var userinfoRE = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^\s"'<>]*@`)

// redactor removes secrets and URL userinfo from text. It is a value type
// built once per Repository; the zero value only strips userinfo.
type redactor struct {
	secrets []string
}

// newRedactor returns a redactor for the given secrets, also covering their
// URL-escaped and base64 forms (as they appear in URLs and HTTP headers).
func newRedactor(secrets ...string) redactor {
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, s := range secrets {
		add(s)
		add(url.QueryEscape(s))
		add(url.PathEscape(s))
		add(base64.StdEncoding.EncodeToString([]byte(s)))
	}
	// Longest first, so a secret that contains another is removed whole.
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return redactor{secrets: out}
}

// with returns a redactor that also removes the given secrets.
func (r redactor) with(secrets ...string) redactor {
	return newRedactor(append(append([]string{}, r.secrets...), secrets...)...)
}

// text returns s without URL userinfo and without any secret.
func (r redactor) text(s string) string {
	s = userinfoRE.ReplaceAllString(s, "$1")
	for _, secret := range r.secrets {
		s = strings.ReplaceAll(s, secret, redactedText)
	}
	return s
}

// gitError is an error whose message has been redacted. It does not keep
// the original error (its message may hold a secret); it unwraps to the
// sentinels the original matched.
type gitError struct {
	msg   string
	kinds []error
}

// Error returns the redacted message.
func (e *gitError) Error() string { return e.msg }

// Unwrap returns the sentinels the original error matched.
func (e *gitError) Unwrap() []error { return e.kinds }

// wrap redacts err, prefixes it with op and classifies it. Errors that are
// already redacted keep their classification.
func (r redactor) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	msg := r.text(err.Error())
	if op != "" {
		msg = op + ": " + msg
	}
	return &gitError{msg: msg, kinds: classify(err)}
}

// staticErrors are errors without dynamic content: safe to keep in the
// chain so callers can test for them.
func staticErrors() []error {
	return []error{
		context.Canceled, context.DeadlineExceeded,
		transport.ErrAuthenticationRequired, transport.ErrAuthorizationFailed,
		transport.ErrRepositoryNotFound, transport.ErrEmptyRemoteRepository,
		ErrAuth, ErrHostKey, ErrInvalidCredentials, ErrRepositoryNotFound,
		ErrBranchNotFound, ErrFileNotFound, ErrNonFastForward,
		ErrManifestNotFound, ErrInvalidManifest, ErrNotOwned,
	}
}

// nonFastForwardMarkers are the phrases Git servers and go-git use when a
// push loses a race (client-side check, receive-pack and forge hooks).
func nonFastForwardMarkers() []string {
	return []string{
		"non-fast-forward", "fetch first", "failed to update ref",
		"cannot lock ref", "failed to lock", "stale info",
		"incorrect old value", "some refs were not updated",
	}
}

// classify maps err to the sentinels a caller can test for.
func classify(err error) []error {
	var kinds []error
	for _, s := range staticErrors() {
		if errors.Is(err, s) {
			kinds = append(kinds, s)
		}
	}
	msg := strings.ToLower(err.Error())
	add := func(s error) {
		for _, k := range kinds {
			if k == s {
				return
			}
		}
		kinds = append(kinds, s)
	}
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired),
		errors.Is(err, transport.ErrAuthorizationFailed),
		strings.Contains(msg, "unable to authenticate"):
		add(ErrAuth)
	case knownhosts.IsHostKeyChanged(err), knownhosts.IsHostUnknown(err),
		strings.Contains(msg, "knownhosts:"):
		add(ErrHostKey)
	case errors.Is(err, transport.ErrRepositoryNotFound):
		add(ErrRepositoryNotFound)
	}
	for _, m := range nonFastForwardMarkers() {
		if strings.Contains(msg, m) {
			add(ErrNonFastForward)
			break
		}
	}
	return kinds
}

// isStorageError reports whether err says the local object store cannot
// be read: objects missing or undecodable, pack or index files damaged,
// repository files gone. Network errors never are, even when they wrap
// io.EOF.
func isStorageError(err error) bool {
	var urlErr *url.Error
	var netErr net.Error
	if errors.As(err, &urlErr) || errors.As(err, &netErr) {
		return false
	}
	for _, e := range []error{
		plumbing.ErrObjectNotFound, plumbing.ErrInvalidType, dotgit.ErrPackfileNotFound,
		idxfile.ErrMalformedIdxFile, packfile.ErrMalformedPackFile, objfile.ErrNegativeSize,
		git.ErrRemoteNotFound, git.ErrRepositoryNotExists,
		zlib.ErrChecksum, zlib.ErrHeader, zlib.ErrDictionary, io.EOF, io.ErrUnexpectedEOF,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	var corrupt flate.CorruptInputError
	var packErr *packfile.Error
	return errors.As(err, &corrupt) || errors.As(err, &packErr)
}
