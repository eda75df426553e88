package gitsync

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Reasons an approval does not count under an ApprovalVerifier. A
// Verdict's Err wraps exactly one of them.
var (
	// ErrUnsigned: the commit that brought the approval carries no
	// signature.
	ErrUnsigned = errors.New("the commit is not signed")
	// ErrUnknownSigner: the commit is signed, by a key that is not among
	// the trusted keys.
	ErrUnknownSigner = errors.New("the commit is signed by a key that is not trusted")
	// ErrBadSignature: the signature does not verify (the commit was
	// changed after signing, or the signature is malformed).
	ErrBadSignature = errors.New("the commit's signature is not valid")
	// ErrSignerExpired: the signing key (or the signature) has expired, or
	// the key was revoked.
	ErrSignerExpired = errors.New("the commit is signed by an expired or revoked key")
	// ErrUnsupportedSignature: the commit is signed in a format go-git
	// cannot verify (SSH, X.509).
	ErrUnsupportedSignature = errors.New("the commit's signature format cannot be verified (only OpenPGP is supported)")
	// ErrNotMerge: MergeOnly is set and the commit is not a merge that
	// brings the approval from its other parent.
	ErrNotMerge = errors.New("the commit is not a merge of the approval branch")
	// ErrHistoryTooLong: the commit that brought the approval is further
	// back than MaxDepth commits of first-parent history (or the history
	// was not fetched).
	ErrHistoryTooLong = errors.New("the commit that brought the approval was not found in the fetched history")
	// ErrReviewsMissing: the Repository asks for reviews on the forge
	// (spec.approvals.reviews) and the approval branch's pull request
	// does not have them, or was not merged into the tracked branch.
	ErrReviewsMissing = errors.New("the forge's pull request does not meet spec.approvals.reviews")
	// ErrReviewsUnread: the forge's reviews could not be read (the forge
	// is down, rate-limits or refuses the token); the check is retried.
	ErrReviewsUnread = errors.New("the forge's reviews could not be read")
)

// DefaultVerifyDepth bounds the first-parent history walked to find the
// commit that brought an approval.
const DefaultVerifyDepth = 1000

// ApprovalVerifier decides whether an approval found on a branch counts,
// by the commit that brought it to that branch: signed by a trusted
// OpenPGP key, and (with MergeOnly) a merge of the approval branch. It
// caches verdicts per branch head, and is safe for concurrent use.
type ApprovalVerifier struct {
	armored      string // the trusted keys, one armored keyring after another
	requireSign  bool
	requireMerge bool
	maxDepth     int

	mu    sync.Mutex
	cache map[verdictKey]Verdict
}

type verdictKey struct {
	head, path, namespace, name string
	approval                    Approval
}

// Verdict says whether one approval counts, and why not.
type Verdict struct {
	// Approval is the approval judged.
	Approval Approval
	// Commit is the commit that brought the approval to the branch ("" when
	// it was not found).
	Commit string
	// Signer names the key that signed Commit (fingerprint and user id),
	// when the signature verified.
	Signer string
	// Reviews, when the Repository asks for reviews on the forge, is what
	// the forge said of the pull request that brought the approval: its
	// URL, merge commit and approving reviewers.
	Reviews string
	// Err is nil when the approval counts; otherwise it wraps one of
	// ErrUnsigned, ErrUnknownSigner, ErrBadSignature, ErrSignerExpired,
	// ErrUnsupportedSignature, ErrNotMerge, ErrHistoryTooLong,
	// ErrReviewsMissing or ErrReviewsUnread.
	Err error
}

// Counts reports whether the approval counts.
func (v Verdict) Counts() bool { return v.Err == nil }

// String says what was decided, naming the commit.
func (v Verdict) String() string {
	what := fmt.Sprintf("approval of revision %s %s", v.Approval.Revision, v.Approval.what())
	switch {
	case v.Err == nil && v.Reviews != "" && v.Signer != "":
		return fmt.Sprintf("%s brought by commit %s, signed by %s; %s", what, v.Commit, v.Signer, v.Reviews)
	case v.Err == nil && v.Reviews != "":
		return fmt.Sprintf("%s brought by commit %s; %s", what, v.Commit, v.Reviews)
	case v.Err == nil && v.Signer != "":
		return fmt.Sprintf("%s brought by commit %s, signed by %s", what, v.Commit, v.Signer)
	case v.Err == nil:
		return fmt.Sprintf("%s brought by merge commit %s", what, v.Commit)
	case v.Commit == "":
		return fmt.Sprintf("%s ignored: %v", what, v.Err)
	}
	return fmt.Sprintf("%s ignored: commit %s: %v", what, v.Commit, v.Err)
}

// NewApprovalVerifier returns a verifier trusting the OpenPGP public keys
// in keys (the data of a Secret: every value an ASCII-armored keyring;
// nil to check no signature) and, with mergeOnly, counting only merges.
// An error names the Secret key that does not hold a usable keyring.
func NewApprovalVerifier(keys map[string][]byte, mergeOnly bool) (*ApprovalVerifier, error) {
	v := &ApprovalVerifier{requireMerge: mergeOnly, maxDepth: DefaultVerifyDepth, cache: map[verdictKey]Verdict{}}
	if keys == nil {
		return v, nil
	}
	v.requireSign = true
	k, err := NewKeyring(keys)
	if err != nil {
		return nil, err
	}
	ring := k.ring
	// Commit.Verify reads one armored block: join the keys into one.
	var b bytes.Buffer
	w, err := armor.Encode(&b, openpgp.PublicKeyType, nil)
	if err != nil {
		return nil, err
	}
	for _, e := range ring {
		if err := e.Serialize(w); err != nil {
			return nil, fmt.Errorf("%w: a public key in the Secret cannot be used: %v", ErrInvalidCredentials, err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	v.armored = b.String()
	return v, nil
}

// Verify judges approval want of the Rollout namespace/name in the
// manifest at path, at the head of s. found is false when the head does
// not hold the approval (nothing to judge). The error is for a history
// that cannot be read, not for an approval that does not count.
func (v *ApprovalVerifier) Verify(s *Snapshot, path, namespace, name string, want Approval) (verdict Verdict, found bool, err error) {
	want = want.entry()
	if !s.Exists() {
		return Verdict{}, false, nil
	}
	key := verdictKey{head: s.Commit, path: path, namespace: namespace, name: name, approval: want}
	v.mu.Lock()
	cached, ok := v.cache[key]
	v.mu.Unlock()
	if ok {
		return cached, true, nil
	}
	defer s.acquire()()
	if !hasApprovalAt(s.commit, path, namespace, name, want) {
		return Verdict{}, false, nil
	}
	verdict = Verdict{Approval: want}
	c, err := v.introducedBy(s.commit, path, namespace, name, want)
	if err != nil {
		if !errors.Is(err, ErrHistoryTooLong) {
			return Verdict{}, true, s.noteDamage(err)
		}
		verdict.Err = err
	} else {
		verdict.Commit = c.Hash.String()
		verdict.Signer, verdict.Err = v.judge(c, path, namespace, name, want)
	}
	v.mu.Lock()
	if len(v.cache) > 256 {
		clear(v.cache)
	}
	v.cache[key] = verdict
	v.mu.Unlock()
	return verdict, true, nil
}

// introducedBy walks the first-parent history from head (which holds
// want) back to the commit whose first parent does not hold it: the commit
// that brought want to the branch.
func (v *ApprovalVerifier) introducedBy(head *object.Commit, path, namespace, name string, want Approval) (*object.Commit, error) {
	c := head
	for range v.maxDepth {
		if len(c.ParentHashes) == 0 {
			return c, nil
		}
		p, err := c.Parent(0)
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return nil, fmt.Errorf("%w (history ends at %s)", ErrHistoryTooLong, c.Hash)
		}
		if err != nil {
			return nil, err
		}
		if !hasApprovalAt(p, path, namespace, name, want) {
			return c, nil
		}
		c = p
	}
	return nil, fmt.Errorf("%w (more than %d commits)", ErrHistoryTooLong, v.maxDepth)
}

// judge checks the signature of c and, with MergeOnly, that c merges the
// approval in from another parent. It returns the signer when the
// signature verified.
func (v *ApprovalVerifier) judge(c *object.Commit, path, namespace, name string, want Approval) (string, error) {
	signer := ""
	if v.requireSign {
		s, err := v.verifySignature(c)
		if err != nil {
			return "", err
		}
		signer = s
	}
	if v.requireMerge && !mergesIn(c, path, namespace, name, want) {
		return signer, ErrNotMerge
	}
	return signer, nil
}

// verifySignature verifies c's signature against the trusted keys with
// go-git's Commit.Verify.
func (v *ApprovalVerifier) verifySignature(c *object.Commit) (string, error) {
	sig := strings.TrimSpace(c.PGPSignature)
	switch {
	case sig == "":
		return "", ErrUnsigned
	case !strings.HasPrefix(sig, "-----BEGIN PGP SIGNATURE-----"):
		return "", ErrUnsupportedSignature
	}
	e, err := c.Verify(v.armored)
	return signatureVerdict(e, err, ErrUnknownSigner, ErrSignerExpired, ErrBadSignature)
}

// signatureVerdict turns an OpenPGP verification's outcome into the signer
// or one of the three errors given: an unknown key, an expired or revoked
// one, or a signature that does not match.
func signatureVerdict(e *openpgp.Entity, err, unknown, expired, bad error) (string, error) {
	switch {
	case err == nil:
		return signerName(e), nil
	case errors.Is(err, pgperrors.ErrUnknownIssuer):
		return "", unknown
	case errors.Is(err, pgperrors.ErrKeyExpired), errors.Is(err, pgperrors.ErrSignatureExpired), errors.Is(err, pgperrors.ErrKeyRevoked):
		return "", expired
	}
	return "", fmt.Errorf("%w: %v", bad, err)
}

// signerName is a key's fingerprint and first user id.
func signerName(e *openpgp.Entity) string {
	if e == nil || e.PrimaryKey == nil {
		return "a trusted key"
	}
	ids := make([]string, 0, len(e.Identities))
	for id := range e.Identities {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	name := fmt.Sprintf("key %X", e.PrimaryKey.Fingerprint)
	if len(ids) > 0 {
		name += " (" + ids[0] + ")"
	}
	return name
}

// mergesIn reports whether c is a merge whose non-first parent holds want.
func mergesIn(c *object.Commit, path, namespace, name string, want Approval) bool {
	for i := 1; i < len(c.ParentHashes); i++ {
		if p, err := c.Parent(i); err == nil && hasApprovalAt(p, path, namespace, name, want) {
			return true
		}
	}
	return false
}

// hasApprovalAt reports whether the manifest at path in c holds want.
func hasApprovalAt(c *object.Commit, path, namespace, name string, want Approval) bool {
	p, err := cleanPath(path)
	if err != nil {
		return false
	}
	t, err := c.Tree()
	if err != nil {
		return false
	}
	data, err := readBlob(t, p)
	if err != nil {
		return false
	}
	as, err := ApprovalsIn(data, namespace, name)
	return err == nil && HasApproval(as, want)
}
