// Package gitsync keeps Git the source of truth for rollgate: it reads and
// writes a remote Git repository in process (go-git), with no Kubernetes
// client and no dependency on the API types.
//
// It provides:
//
//   - Repository: a local copy of the branch heads of one remote, with
//     Snapshot/ReadFile to read files and Update to write one commit with
//     fetch-rebuild-push retries when another writer wins a race. Every
//     exchange with the remote is bounded by Options.Timeout; an on-disk
//     copy (Options.Dir) found damaged is dropped and fetched afresh.
//   - Credentials: HTTPS (basic, token, bearer) or SSH (identity plus
//     mandatory known_hosts) built from Secret data. Secrets never appear
//     in errors, commit messages or status files. Optional OpenPGP commit
//     signing (OpenPGPSigner).
//   - Writer: coalesced status write-back, one YAML file per Rollout plus a
//     README.md overview, on a status branch (default rollgate/status), and
//     ReadStatus to read it back from Git alone.
//   - Approvals as branches: ProposeApproval edits the Rollout manifest's
//     spec.approvals on rollgate/approve/<ns>/<name>/<revision>-step-<n>
//     (<revision>-attempt-<k>-step-<n> after a retry), removing in the same
//     commit the entries that can no longer open a gate (MaxApprovals);
//     ApprovalsOnBranch reads what has been merged.
//   - Reverts: RevertImages (pure) and Revert (to a rollgate/revert/...
//     branch or straight to the tracked branch) set images back to the
//     stable version in plain manifests, kustomizations and marked Helm
//     values.
//
// YAML edits locate nodes with kyaml and splice only the changed bytes
// into the original text, so comments, blank lines, quoting and indentation
// elsewhere in the file are untouched; every splice is verified by parsing
// the result.
package gitsync
