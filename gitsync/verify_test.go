package gitsync_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

// testKey is an OpenPGP key pair for the verification tests.
type testKey struct {
	entity *openpgp.Entity
	// signAt is the signing time (the zero time: now).
	signAt time.Time
}

func newTestKey(t testing.TB, name string, created time.Time, lifetime time.Duration) testKey {
	t.Helper()
	cfg := &packet.Config{KeyLifetimeSecs: uint32(lifetime / time.Second)}
	if !created.IsZero() {
		cfg.Time = func() time.Time { return created }
	}
	e, err := openpgp.NewEntity(name, "", name+"@rollgate.invalid", cfg)
	if err != nil {
		t.Fatal(err)
	}
	k := testKey{entity: e}
	if !created.IsZero() {
		k.signAt = created.Add(time.Minute)
	}
	return k
}

// public is the armored public key, as an approvers' Secret holds it.
func (k testKey) public(t testing.TB) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := armor.Encode(&b, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.entity.Serialize(w); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return b.Bytes()
}

// sign signs a commit as `git commit -S` would.
func (k testKey) sign(payload []byte) ([]byte, error) {
	var cfg *packet.Config
	if !k.signAt.IsZero() {
		cfg = &packet.Config{Time: func() time.Time { return k.signAt }}
	}
	var b bytes.Buffer
	err := openpgp.ArmoredDetachSign(&b, k.entity, bytes.NewReader(payload), cfg)
	return b.Bytes(), err
}

func sshSignature([]byte) ([]byte, error) {
	return []byte("-----BEGIN SSH SIGNATURE-----\nU1NIU0lHAAAAAQ==\n-----END SSH SIGNATURE-----\n"), nil
}

// tampered signs other content than the commit's.
func (k testKey) tampered(payload []byte) ([]byte, error) {
	return k.sign(append(payload, "changed after signing\n"...))
}

// TestVerifyApprovals judges approvals brought to main in every way the
// real Git server allows: merges and direct commits, signed by a trusted
// key, by another key, by an expired key, with SSH, or not at all.
func TestVerifyApprovals(t *testing.T) {
	trusted := newTestKey(t, "approver", time.Time{}, 0)
	other := newTestKey(t, "stranger", time.Time{}, 0)
	expired := newTestKey(t, "retired", time.Now().Add(-48*time.Hour), time.Hour)
	keys := map[string][]byte{"approver.asc": trusted.public(t), "retired.asc": expired.public(t)}

	// How the approval reaches main: merged from the approval branch (main
	// moved meanwhile, so a merge commit), or committed straight to main;
	// then the tip of main is signed with sign (nil: unsigned).
	type how struct {
		merge bool
		sign  gitserver.SignFunc
	}
	cases := []struct {
		name      string
		how       how
		mergeOnly bool
		want      error // nil: counts
	}{
		{"merge signed by a trusted key", how{true, trusted.sign}, true, nil},
		{"merge signed by a trusted key, merges not required", how{true, trusted.sign}, false, nil},
		{"unsigned merge", how{true, nil}, false, gitsync.ErrUnsigned},
		{"merge signed by another key", how{true, other.sign}, false, gitsync.ErrUnknownSigner},
		{"merge signed by an expired key", how{true, expired.sign}, false, gitsync.ErrSignerExpired},
		{"merge signed with SSH", how{true, sshSignature}, false, gitsync.ErrUnsupportedSignature},
		{"signature of other content", how{true, trusted.tampered}, false, gitsync.ErrBadSignature},
		{"direct commit signed by a trusted key", how{false, trusted.sign}, false, nil},
		{"direct commit signed by a trusted key, merges required", how{false, trusted.sign}, true, gitsync.ErrNotMerge},
		{"unsigned direct commit, merges required", how{false, nil}, true, gitsync.ErrUnsigned},
	}
	before, err := os.ReadFile("testdata/approve-append-block/before.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, repo := newRepo(t, map[string]string{rolloutPath: string(before), "other.txt": "x\n"})
			var approving string
			if tc.how.merge {
				p, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", step2, "")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := srv.Commit("app", "main", "unrelated", map[string]string{"other.txt": "y\n"}); err != nil {
					t.Fatal(err)
				}
				approving, err = srv.Merge("app", "main", p.Branch, "Merge approval")
				if err != nil {
					t.Fatal(err)
				}
			} else {
				if approving, err = gitsync.RecordApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", step2, ""); err != nil {
					t.Fatal(err)
				}
			}
			if tc.how.sign != nil {
				if approving, err = srv.SignTip("app", "main", tc.how.sign); err != nil {
					t.Fatal(err)
				}
			}
			// Later commits do not change which commit brought the approval.
			if _, err := srv.Commit("app", "main", "later, unsigned", map[string]string{"other.txt": "z\n"}); err != nil {
				t.Fatal(err)
			}

			v, err := gitsync.NewApprovalVerifier(keys, tc.mergeOnly)
			if err != nil {
				t.Fatal(err)
			}
			full := openRepo(t, gitsync.Options{URL: srv.URL + "/app.git", Depth: -1})
			snap, err := full.Snapshot(ctx(t), "main")
			if err != nil {
				t.Fatal(err)
			}
			got, found, err := v.Verify(snap, rolloutPath, "demo", "echoserver", step2)
			if err != nil || !found {
				t.Fatalf("Verify: found %v, %v", found, err)
			}
			if got.Commit != approving {
				t.Errorf("the approving commit is %s, want %s (%s)", got.Commit, approving, got)
			}
			if !errors.Is(got.Err, tc.want) || (tc.want == nil) != got.Counts() {
				t.Fatalf("verdict %q, want %v", got, tc.want)
			}
			if !strings.Contains(got.String(), approving) {
				t.Errorf("the verdict does not name the commit: %q", got)
			}
			if tc.how.sign != nil && got.Counts() && !strings.Contains(got.Signer, "approver") {
				t.Errorf("signer = %q, want the approver's key", got.Signer)
			}
			// Another step is not approved at all: nothing to judge.
			if _, found, err := v.Verify(snap, rolloutPath, "demo", "echoserver", gitsync.Approval{Revision: "7b1e2a9f", Step: 3}); found || err != nil {
				t.Fatalf("step 3 found %v, %v", found, err)
			}
		})
	}
}

// TestVerifyNeedsHistory: a shallow clone cannot tell which commit brought
// an approval, and says so instead of guessing.
func TestVerifyNeedsHistory(t *testing.T) {
	before, err := os.ReadFile("testdata/approve-append-block/before.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv, repo := newRepo(t, map[string]string{rolloutPath: string(before)})
	if _, err := gitsync.RecordApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", step2, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Commit("app", "main", "later", map[string]string{"other.txt": "z\n"}); err != nil {
		t.Fatal(err)
	}
	shallow := openRepo(t, gitsync.Options{URL: srv.URL + "/app.git"})
	snap, err := shallow.Snapshot(ctx(t), "main")
	if err != nil {
		t.Fatal(err)
	}
	v, err := gitsync.NewApprovalVerifier(nil, true)
	if err != nil {
		t.Fatal(err)
	}
	got, found, err := v.Verify(snap, rolloutPath, "demo", "echoserver", step2)
	if err != nil || !found || !errors.Is(got.Err, gitsync.ErrHistoryTooLong) {
		t.Fatalf("verdict %v, found %v, err %v; want ErrHistoryTooLong", got, found, err)
	}
}

// TestApprovalVerifierKeys: a Secret without a usable public key is an
// error naming the Secret key, never quoting it.
func TestApprovalVerifierKeys(t *testing.T) {
	for name, keys := range map[string]map[string][]byte{
		"not armored": {"team.asc": []byte("secret-looking garbage")},
		"empty":       {},
	} {
		_, err := gitsync.NewApprovalVerifier(keys, false)
		if !errors.Is(err, gitsync.ErrInvalidCredentials) || strings.Contains(err.Error(), "garbage") {
			t.Errorf("%s: error %v", name, err)
		}
		if name == "not armored" && !strings.Contains(err.Error(), "team.asc") {
			t.Errorf("the error does not name the Secret key: %v", err)
		}
	}
}

// BenchmarkVerifyApproval200Deep judges an approval brought by a signed
// merge 200 commits below the head, with no cached verdict: the walk back
// through the history and one signature check.
func BenchmarkVerifyApproval200Deep(b *testing.B) {
	before, err := os.ReadFile("testdata/approve-append-block/before.yaml")
	if err != nil {
		b.Fatal(err)
	}
	srv := gitserver.Start(b, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{rolloutPath: string(before)})
	if err != nil {
		b.Fatal(err)
	}
	repo := openRepo(b, gitsync.Options{URL: url, Depth: -1})
	if _, err := gitsync.RecordApproval(context.Background(), repo, "main", rolloutPath, "demo", "echoserver", step2, ""); err != nil {
		b.Fatal(err)
	}
	key := newTestKey(b, "approver", time.Time{}, 0)
	if _, err := srv.SignTip("app", "main", key.sign); err != nil {
		b.Fatal(err)
	}
	for i := range 200 {
		if _, err := srv.Commit("app", "main", "later", map[string]string{"other.txt": fmt.Sprint(i)}); err != nil {
			b.Fatal(err)
		}
	}
	snap, err := repo.Snapshot(context.Background(), "main")
	if err != nil {
		b.Fatal(err)
	}
	keys := map[string][]byte{"approver.asc": key.public(b)}
	b.ResetTimer()
	for range b.N {
		v, err := gitsync.NewApprovalVerifier(keys, false)
		if err != nil {
			b.Fatal(err)
		}
		got, found, err := v.Verify(snap, rolloutPath, "demo", "echoserver", step2)
		if err != nil || !found || !got.Counts() {
			b.Fatalf("verdict %v, %v, %v", got, found, err)
		}
	}
}
