package gitsync

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// ApprovalBranchPrefix is the common prefix of approval branches.
const ApprovalBranchPrefix = "rollgate/approve/"

// ApprovalBranch returns the branch proposing approval of step of the
// Rollout namespace/name for canary revision:
// rollgate/approve/<namespace>/<name>/<revision>-step-<step>.
func ApprovalBranch(namespace, name, revision string, step int) string {
	return fmt.Sprintf("%s%s/%s/%s-step-%d", ApprovalBranchPrefix, namespace, name, revision, step)
}

// ApprovalBranchesOf returns the prefix shared by the approval branches of
// one Rollout.
func ApprovalBranchesOf(namespace, name string) string {
	return ApprovalBranchPrefix + namespace + "/" + name + "/"
}

// ParseApprovalBranch splits an approval branch name into its parts.
func ParseApprovalBranch(branch string) (namespace, name, revision string, step int, ok bool) {
	rest, found := strings.CutPrefix(branch, ApprovalBranchPrefix)
	parts := strings.Split(rest, "/")
	if !found || len(parts) != 3 {
		return "", "", "", 0, false
	}
	i := strings.LastIndex(parts[2], "-step-")
	if i <= 0 {
		return "", "", "", 0, false
	}
	step, err := strconv.Atoi(parts[2][i+len("-step-"):])
	if err != nil {
		return "", "", "", 0, false
	}
	return parts[0], parts[1], parts[2][:i], step, true
}

// HasApproval reports whether approvals approve exactly step of revision.
// An approval for another revision or another step does not count: a
// stale approval can never release a later revision.
func HasApproval(approvals []Approval, revision string, step int) bool {
	for _, a := range approvals {
		if a.Revision == revision && a.Step == step {
			return true
		}
	}
	return false
}

// ApprovalsIn returns spec.approvals of the Rollout namespace/name in a
// manifest file (which may hold several YAML documents).
func ApprovalsIn(manifest []byte, namespace, name string) ([]Approval, error) {
	f, err := parseYAMLFile(manifest)
	if err != nil {
		return nil, err
	}
	i, err := findRollout(f, namespace, name)
	if err != nil {
		return nil, err
	}
	return approvalsOf(f.root(i))
}

func approvalsOf(root *yaml.Node) ([]Approval, error) {
	_, spec := mapGet(root, "spec")
	_, seq := mapGet(spec, "approvals")
	if seq == nil || (seq.Kind == yaml.ScalarNode && seq.Tag == "!!null") {
		return nil, nil
	}
	var out []Approval
	if err := seq.Decode(&out); err != nil {
		return nil, fmt.Errorf("%w: spec.approvals: %v", ErrInvalidManifest, err)
	}
	return out, nil
}

