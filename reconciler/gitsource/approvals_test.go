package gitsource

import (
	"errors"
	"strings"
	"testing"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// TestApprovalVerifierFromSecret: a Secret without a usable public key is
// an error naming spec.approvals.signedBy (the Repository is then not
// Ready and no approval from Git counts).
func TestApprovalVerifierFromSecret(t *testing.T) {
	p := &v1alpha1.ApprovalPolicy{SignedBy: &v1alpha1.LocalObjectReference{Name: "approvers"}}
	_, err := approvalVerifier(p, map[string][]byte{"alice.asc": []byte("not a key")})
	if !errors.Is(err, gitsync.ErrInvalidCredentials) || !strings.Contains(err.Error(), "spec.approvals.signedBy") || !strings.Contains(err.Error(), "alice.asc") {
		t.Fatalf("error %v", err)
	}
	if v, err := approvalVerifier(&v1alpha1.ApprovalPolicy{MergeOnly: true}, nil); v == nil || err != nil {
		t.Fatalf("mergeOnly: %v %v", v, err)
	}
	if v, err := approvalVerifier(nil, nil); v != nil || err != nil {
		t.Fatalf("no policy: %v %v", v, err)
	}
}
