// Package gitsource is rollgate's Git source, and the only code that
// fetches from Git. A Pool keeps one open repository (Repo) per
// Repository object: its clones, its status writer, the proposer that
// pushes approval branches, the verifier of approvals under
// spec.approvals, and the fleet cache (the status files every cluster
// writes). The Repository controller fetches the branches gates wait on
// and writes each Repository's status; a fetch that moves a branch wakes
// the Rollouts waiting at a gate whose manifest it changed, and the push
// endpoint (reconciler/gitpush) makes a Repository fetch at once.
//
// The Rollout controller (package rollout) consumes a Repo through a
// small interface (the approvals its gate reads at a head, the status
// writer, approval branches, reverts, the fleet's progress) and is woken
// through the sources the Pool hands out (Woken, Written, Proposed). This
// package writes the status and conditions of Repositories only; those of
// Rollouts are package rollout's.
package gitsource
