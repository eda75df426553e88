package gitsync_test

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/gitsync"
)

// The stable and canary revisions of the Rollout in the pruning tests.
const (
	stableRev = "5f00aa"
	canaryRev = "7b1e2a9f"
)

// liveApprovals is what an approval edit adding a, told the live
// revisions, leaves in a list that held had: the entries of a live
// revision, in their order, except those of an earlier attempt of
// a.Revision, then a.
func liveApprovals(had []gitsync.Approval, a gitsync.Approval, live []string) []gitsync.Approval {
	var out []gitsync.Approval
	for _, e := range had {
		switch {
		case e.Revision == a.Revision && max(e.Attempt, 1) < max(a.Attempt, 1):
		case e.Revision == a.Revision || slices.Contains(live, e.Revision):
			out = append(out, e)
		}
	}
	if a.Attempt <= 1 {
		a.Attempt = 0
	}
	return append(out, a)
}

// overfull returns a list layout's manifest whose approvals hold 101
// entries: three of the stable revision and three of the canary one,
// scattered among 95 of older revisions, with comments around them.
func overfull(layout string) []byte {
	var items []string
	for i := range 95 {
		items = append(items, fmt.Sprintf("{revision: 0ld%03d, step: %d}", i, i%3+1))
	}
	for i, rev := range []string{stableRev, canaryRev} {
		for step := 1; step <= 3; step++ {
			at := 10 + 30*(step-1) + 5*i // spread among the old ones
			items = slices.Insert(items, at, fmt.Sprintf("{revision: %s, step: %d}", rev, step))
		}
	}
	var b strings.Builder
	b.WriteString("# The Rollout: this comment stays.\n")
	switch layout {
	case "block":
		b.WriteString("apiVersion: rollgate.dev/v1alpha1\nkind: Rollout\nmetadata:\n  name: echoserver\nspec:\n  # Approvals, one per gate.\n  approvals:\n")
		blockList(&b, "  ", items)
		b.WriteString("  paused: false   # the end of spec\n")
	case "flow":
		b.WriteString("apiVersion: rollgate.dev/v1alpha1\nkind: Rollout\nmetadata:\n  name: echoserver\nspec:\n")
		fmt.Fprintf(&b, "  approvals: [%s]   # one line\n  paused: false   # the end of spec\n", strings.Join(items, ", "))
	case "values":
		b.WriteString("rollout:\n  approvals:   # rollgate:approvals demo/echoserver\n")
		blockList(&b, "    ", items)
		b.WriteString("  paused: false   # the end of spec\n")
	}
	return []byte(b.String())
}

// blockList writes items as a block sequence indented by indent, with a
// comment halfway through.
func blockList(b *strings.Builder, indent string, items []string) {
	for i, it := range items {
		if i == 50 {
			b.WriteString(indent + "# halfway\n")
		}
		fmt.Fprintf(b, "%s- %s\n", indent, it)
	}
}

// TestAddApprovalPrunesAnOverfullList: a manifest that already holds more
// entries than the CRD allows (a user who hit the cap) comes back from the
// next approval edit with only the live release's entries, comments and
// all, whatever the layout of the list.
func TestAddApprovalPrunesAnOverfullList(t *testing.T) {
	a := gitsync.Approval{Revision: canaryRev, Step: 4}
	for _, layout := range []string{"block", "flow", "values"} {
		t.Run(layout, func(t *testing.T) {
			before := overfull(layout)
			had, err := gitsync.ApprovalsIn(before, "demo", "echoserver")
			if err != nil || len(had) != gitsync.MaxApprovals+1 {
				t.Fatalf("the manifest holds %d approvals (%v), want %d", len(had), err, gitsync.MaxApprovals+1)
			}
			out, changed, err := gitsync.AddApproval(before, "demo", "echoserver", a, stableRev, canaryRev)
			if err != nil || !changed {
				t.Fatalf("AddApproval: changed %v, %v", changed, err)
			}
			got, err := gitsync.ApprovalsIn(out, "demo", "echoserver")
			if err != nil {
				t.Fatal(err)
			}
			if want := liveApprovals(had, a, []string{stableRev, canaryRev}); !reflect.DeepEqual(got, want) || len(got) != 7 {
				t.Fatalf("approvals after the edit (%d) = %+v, want the 6 live ones and the new one: %+v", len(got), got, want)
			}
			// The text around the list is untouched (no round trip).
			head := before[:strings.Index(string(before), "approvals:")]
			if tail := "  paused: false   # the end of spec\n"; !strings.HasPrefix(string(out), string(head)) || !strings.HasSuffix(string(out), tail) {
				t.Errorf("the text around the list changed:\n%s", out)
			}
			if layout != "flow" && !strings.Contains(string(out), "# halfway\n") {
				t.Errorf("the comment line inside the list was lost:\n%s", out)
			}
			if layout == "flow" && !strings.Contains(string(out), "step: 4}]   # one line\n") {
				t.Errorf("the list's line comment was lost:\n%s", out)
			}
			if layout == "block" && !strings.HasSuffix(string(out), "  - {revision: 7b1e2a9f, step: 4}\n  paused: false   # the end of spec\n") {
				t.Errorf("the new entry is not where the list ends:\n%s", out)
			}
		})
	}
}

// TestAddApprovalWithoutLiveRevisionsKeepsAll: a caller that does not
// name the live revisions (the API before pruning) only appends.
func TestAddApprovalWithoutLiveRevisionsKeepsAll(t *testing.T) {
	before := overfull("block")
	out, _, err := gitsync.AddApproval(before, "demo", "echoserver", gitsync.Approval{Revision: canaryRev, Step: 4})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := gitsync.ApprovalsIn(out, "demo", "echoserver"); err != nil || len(got) != gitsync.MaxApprovals+2 {
		t.Fatalf("approvals after the edit: %d, %v; want all 101 and the new one", len(got), err)
	}
}

// TestMaxApprovalsIsTheCRDCap: gitsync's bound is the maxItems of
// spec.approvals in the CRD the chart installs.
func TestMaxApprovalsIsTheCRDCap(t *testing.T) {
	data, err := os.ReadFile("../charts/rollgate/crds/rollgate.dev_rollouts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string
				Schema struct {
					OpenAPIV3Schema struct {
						Properties struct {
							Spec struct {
								Properties struct {
									Approvals struct {
										MaxItems int `json:"maxItems"`
									}
								}
							}
						}
					} `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(data, &crd); err != nil || len(crd.Spec.Versions) == 0 {
		t.Fatalf("reading the CRD: %v", err)
	}
	for _, v := range crd.Spec.Versions {
		if got := v.Schema.OpenAPIV3Schema.Properties.Spec.Properties.Approvals.MaxItems; got != gitsync.MaxApprovals {
			t.Errorf("%s: spec.approvals maxItems = %d, gitsync.MaxApprovals = %d", v.Name, got, gitsync.MaxApprovals)
		}
	}
}

// TestProposeApprovalPrunes: the approval branch, on the real Git server,
// carries the pruned manifest, says in its message what it removed, and
// replaces a branch of the same gate that still holds entries to prune.
func TestProposeApprovalPrunes(t *testing.T) {
	before, err := os.ReadFile("testdata/approve-prune-block/before.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/approve-prune-block/after.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv, repo := newRepo(t, map[string]string{rolloutPath: string(before)})
	a := gitsync.Approval{Revision: canaryRev, Step: 2, Attempt: 2}
	// A branch of this gate written without pruning (by an older rollgate,
	// or `rollgate approve` without the revisions).
	old, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", a, "")
	if err != nil || !old.Pushed {
		t.Fatalf("proposal without live revisions = %+v, %v", old, err)
	}
	p, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", a, "rollgate", stableRev, canaryRev)
	if err != nil || !p.Pushed || p.Branch != old.Branch || p.Commit == old.Commit {
		t.Fatalf("proposal = %+v, %v; want the branch rebuilt, pruned", p, err)
	}
	if got, err := srv.ReadFile("app", p.Branch, rolloutPath); err != nil || got != string(want) {
		t.Fatalf("manifest on the approval branch (%v):\n%s", err, got)
	}
	body, err := gitLogBody(t, srv, p.Branch)
	if err != nil || !strings.Contains(body, "Removes 4 entries that can no longer open a gate") ||
		!strings.Contains(body, "1a2b3c step 1, 1a2b3c step 2, 9e8d7c step 1, 7b1e2a9f step 1") {
		t.Fatalf("the commit message does not say what it removes (%v):\n%s", err, body)
	}
	if again, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", a, "", stableRev, canaryRev); err != nil || again.Pushed || again.Commit != p.Commit {
		t.Fatalf("second proposal = %+v, %v; want the pruned branch reused", again, err)
	}
	if _, err := srv.Merge("app", "main", p.Branch, "Merge pull request #7"); err != nil {
		t.Fatal(err)
	}
	as, err := gitsync.ApprovalsOnBranch(ctx(t), repo, "main", rolloutPath, "demo", "echoserver")
	if err != nil {
		t.Fatal(err)
	}
	wantAs := []gitsync.Approval{{Revision: stableRev, Step: 1}, {Revision: stableRev, Step: 2},
		{Revision: canaryRev, Step: 1, Attempt: 2}, {Revision: canaryRev, Step: 2, Attempt: 2}}
	if !reflect.DeepEqual(as, wantAs) {
		t.Fatalf("approvals on main after the merge = %+v, want %+v", as, wantAs)
	}

	// A direct approval prunes the same way.
	if _, err := gitsync.RecordApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver",
		gitsync.Approval{Revision: "e1e1e1", Step: 1}, "bob", canaryRev, "e1e1e1"); err != nil {
		t.Fatal(err)
	}
	as, err = gitsync.ApprovalsOnBranch(ctx(t), repo, "main", rolloutPath, "demo", "echoserver")
	wantAs = []gitsync.Approval{{Revision: canaryRev, Step: 1, Attempt: 2}, {Revision: canaryRev, Step: 2, Attempt: 2}, {Revision: "e1e1e1", Step: 1}}
	if err != nil || !reflect.DeepEqual(as, wantAs) {
		t.Fatalf("approvals after a direct approval of the next release = %+v, %v; want %+v", as, err, wantAs)
	}
}

// TestApprovalBranchesOfEarlierReleasesAreDeleted follows what the
// reconciler does at each gate, on the real Git server: propose the
// gate's branch (pruning the manifest), then delete the Rollout's other
// approval branches. Branches of the previous release, merged or not, go;
// another Rollout's branches stay.
func TestApprovalBranchesOfEarlierReleasesAreDeleted(t *testing.T) {
	before, err := os.ReadFile("testdata/approve-prune-block/before.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv, repo := newRepo(t, map[string]string{rolloutPath: string(before)})
	gate := func(a gitsync.Approval, live ...string) gitsync.Proposal {
		t.Helper()
		p, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", a, "rollgate", live...)
		if err != nil || !p.Pushed {
			t.Fatalf("proposal of %+v = %+v, %v", a, p, err)
		}
		if _, err := gitsync.CleanupApprovalBranches(ctx(t), repo, "demo", "echoserver", func(b string) bool { return b == p.Branch }); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Another Rollout, whose name extends this one's, has a branch.
	neighbour := gitsync.ApprovalBranch("demo", "echoserver-api", gitsync.Approval{Revision: "abc", Step: 1})
	if _, err := srv.Commit("app", neighbour, "another rollout's approval", map[string]string{"x.txt": "x\n"}); err != nil {
		t.Fatal(err)
	}

	// Release of the canary, attempt 2: step 2 is approved by merge, step 3
	// is proposed and then left unmerged (the release is promoted).
	step2 := gate(gitsync.Approval{Revision: canaryRev, Step: 2, Attempt: 2}, stableRev, canaryRev)
	if _, err := srv.Merge("app", "main", step2.Branch, "Merge pull request #8"); err != nil {
		t.Fatal(err)
	}
	step3 := gate(gitsync.Approval{Revision: canaryRev, Step: 3, Attempt: 2}, stableRev, canaryRev)
	if h, _ := srv.Head("app", step2.Branch); h != "" {
		t.Fatalf("the merged branch %s of the gate before survived the next gate", step2.Branch)
	}

	// The canary became stable; the next release reaches its first gate.
	next := gate(gitsync.Approval{Revision: "e1e1e1", Step: 1}, canaryRev, "e1e1e1")
	for _, b := range []string{step2.Branch, step3.Branch} {
		if h, _ := srv.Head("app", b); h != "" {
			t.Errorf("approval branch %s of the previous release survived", b)
		}
	}
	for _, b := range []string{next.Branch, neighbour} {
		if h, _ := srv.Head("app", b); h == "" {
			t.Errorf("branch %s was deleted", b)
		}
	}
	as, err := gitsync.ApprovalsOnBranch(ctx(t), repo, next.Branch, rolloutPath, "demo", "echoserver")
	want := []gitsync.Approval{{Revision: canaryRev, Step: 1, Attempt: 2}, {Revision: canaryRev, Step: 2, Attempt: 2}, {Revision: "e1e1e1", Step: 1}}
	if err != nil || !reflect.DeepEqual(as, want) {
		t.Fatalf("approvals on %s = %+v, %v; want %+v", next.Branch, as, err, want)
	}
}

// TestPruningKeepsSignedApprovalsCounting: the approval of step 1, merged
// with a trusted signature, is still brought by that signed merge after
// the branch of step 2 pruned the older entries: pruning never rewrites
// an entry of the live release.
func TestPruningKeepsSignedApprovalsCounting(t *testing.T) {
	trusted := newTestKey(t, "approver", time.Time{}, 0)
	manifest := "apiVersion: rollgate.dev/v1alpha1\nkind: Rollout\nmetadata:\n  name: echoserver\nspec:\n  approvals:\n" +
		"  - {revision: 1a2b3c, step: 1}\n  - {revision: 5f00aa, step: 1}\n  - {revision: 9e8d7c, step: 1}\n"
	srv, repo := newRepo(t, map[string]string{rolloutPath: manifest, "other.txt": "x\n"})
	merge := func(a gitsync.Approval, live ...string) string {
		t.Helper()
		p, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", a, "", live...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Commit("app", "main", "unrelated", map[string]string{"other.txt": a.Revision + fmt.Sprint(a.Step)}); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Merge("app", "main", p.Branch, "Merge approval"); err != nil {
			t.Fatal(err)
		}
		signed, err := srv.SignTip("app", "main", trusted.sign)
		if err != nil {
			t.Fatal(err)
		}
		return signed
	}
	step1, step2 := gitsync.Approval{Revision: canaryRev, Step: 1}, gitsync.Approval{Revision: canaryRev, Step: 2}
	// Step 1 by a branch that did not prune (an older rollgate), step 2 by
	// one that does.
	merged1 := merge(step1)
	merged2 := merge(step2, stableRev, canaryRev)

	full := openRepo(t, gitsync.Options{URL: srv.URL + "/app.git", Depth: -1})
	snap, err := full.Snapshot(ctx(t), "main")
	if err != nil {
		t.Fatal(err)
	}
	data, err := snap.ReadFile(rolloutPath)
	if err != nil {
		t.Fatal(err)
	}
	if as, err := gitsync.ApprovalsIn(data, "demo", "echoserver"); err != nil || len(as) != 3 || gitsync.HasApproval(as, gitsync.Approval{Revision: "1a2b3c", Step: 1}) {
		t.Fatalf("approvals on main = %+v, %v; want the old revisions pruned", as, err)
	}
	v, err := gitsync.NewApprovalVerifier(map[string][]byte{"approver.asc": trusted.public(t)}, true)
	if err != nil {
		t.Fatal(err)
	}
	for a, by := range map[gitsync.Approval]string{step1: merged1, step2: merged2} {
		got, found, err := v.Verify(snap, rolloutPath, "demo", "echoserver", a)
		if err != nil || !found || !got.Counts() || got.Commit != by {
			t.Errorf("step %d: verdict %q (found %v, %v); want it counted, brought by %s", a.Step, got, found, err, by)
		}
	}
}
