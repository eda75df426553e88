package main

import (
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/strategy"
	"github.com/rollgate/rollgate/strategy/plantext"
)

// planReport is what `rollgate plan` prints (the JSON output as is).
type planReport struct {
	// Base is the --base ref, when given.
	Base     string          `json:"base,omitempty"`
	Rollouts []rolloutPlan   `json:"rollouts"`
	Invalid  []invalidObject `json:"invalid,omitempty"`
	// Warnings are what the API server accepts that will not work as
	// written.
	Warnings []planWarning `json:"warnings,omitempty"`
	// Groups are the lockstep groups the Rollouts name (spec.group).
	Groups []groupPlan `json:"groups,omitempty"`
}

// groupPlan is a lockstep group as the files declare it.
type groupPlan struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Members   []string `json:"members"`
	// Coordinator is the member whose gates are the group's (the first
	// by name, when all members release together).
	Coordinator string `json:"coordinator"`
}

// invalidObject is an object the API server would refuse, and why.
type invalidObject struct {
	Source    string   `json:"source"`
	Kind      string   `json:"kind"`
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Errors    []string `json:"errors"`
}

// rolloutPlan is what one Rollout's release does, step by step.
type rolloutPlan struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Source    string `json:"source"`
	Strategy  string `json:"strategy"`
	// Workload is "<Kind> <name>"; Replicas its declared size; Unit is
	// "pods", or "declared" when the size is not in the files (the steps
	// then give their replicas as written).
	Workload string `json:"workload"`
	Replicas int32  `json:"replicas"`
	Unit     string `json:"unit"`
	// Routers name each trafficRoutings entry.
	Routers []string `json:"routers,omitempty"`
	// Analysis is the analysis of the whole release (templates).
	Analysis []string   `json:"analysis,omitempty"`
	Steps    []stepPlan `json:"steps"`
	// Release says whether the change releases it (with --base).
	Release *releaseChange `json:"release,omitempty"`
	// Group is spec.group.name; Coordinator the member whose gates are
	// the group's.
	Group       string `json:"group,omitempty"`
	Coordinator string `json:"coordinator,omitempty"`
	// Notes are what the plan could not know from the files.
	Notes []string `json:"notes,omitempty"`
	// Error is why the steps could not be resolved.
	Error string `json:"error,omitempty"`
	// extraWorkload: the old pods stay beside the new ones.
	extraWorkload bool
}

// stepPlan is one step once done.
type stepPlan struct {
	Step int `json:"step"`
	// New and Old are the pods of each revision; when the workload's size
	// is not known, NewDeclared is the step's replicas as written and Old
	// is 0.
	New         int32  `json:"new"`
	Old         int32  `json:"old"`
	NewDeclared string `json:"newDeclared,omitempty"`
	// Traffic is the traffic on each router.
	Traffic []plantext.Traffic `json:"traffic,omitempty"`
	// Pause is a duration, "approval" for a gate, or "".
	Pause string `json:"pause,omitempty"`
	// ApprovalBranch is the branch rollgate pushes for a gate.
	ApprovalBranch string   `json:"approvalBranch,omitempty"`
	Analysis       []string `json:"analysis,omitempty"`
}

// releaseChange says whether a change releases a Rollout's workload.
type releaseChange struct {
	Releases bool   `json:"releases"`
	Reason   string `json:"reason"`
	// Images are the containers whose image changed, "name: old -> new".
	Images []string `json:"images,omitempty"`
}

// planRollout plans one valid Rollout against the workload in the files.
func planRollout(ro *v1alpha1.Rollout, source string, head, base *manifestSet, nodes int32) rolloutPlan {
	ref := ro.Spec.WorkloadRef
	p := rolloutPlan{Namespace: ro.Namespace, Name: ro.Name, Source: source, Strategy: "canary",
		Workload: ref.Kind + " " + ref.Name, Unit: "pods"}
	if ro.Spec.Strategy.BlueGreen != nil {
		p.Strategy = "blueGreen"
	}
	p.extraWorkload = ro.Spec.Strategy.Canary != nil && ro.Spec.Strategy.Canary.EnableExtraWorkloadForCanary
	tpl, replicas, note := workloadIn(head, ro, nodes)
	if note != "" {
		p.Notes = append(p.Notes, note)
	}
	if replicas < 0 {
		p.Unit, replicas = "declared", 100
	}
	p.Replicas = replicas
	for _, r := range ro.Spec.Strategy.TrafficRoutings() {
		p.Routers = append(p.Routers, plantext.RouterName(r))
	}
	if a := ro.Spec.Strategy.BackgroundAnalysis(); a != nil {
		p.Analysis = a.Templates
	}
	steps, err := strategy.Preview(&ro.Spec, replicas)
	if err != nil {
		p.Error = err.Error()
		return p
	}
	for i, s := range steps {
		sp := stepPlan{Step: i + 1, New: s.Replicas, Old: s.Stable}
		if p.Unit == "declared" {
			sp.New, sp.Old, sp.NewDeclared = 0, 0, declaredReplicas(ro.Spec.Strategy.Steps()[i])
		}
		for _, r := range p.Routers {
			sp.Traffic = append(sp.Traffic, plantext.TrafficOn(r, s.Traffic))
		}
		switch {
		case s.Gate:
			sp.Pause = "approval"
			sp.ApprovalBranch = gitsync.ApprovalBranch(ro.Namespace, ro.Name, gitsync.Approval{Revision: "<revision>", Step: i + 1})
		case s.Pause > 0:
			sp.Pause = s.Pause.String()
		}
		if a := ro.Spec.Strategy.StepAnalysis(int32(i + 1)); a != nil {
			sp.Analysis = a.Templates
		}
		if s.Verify {
			sp.Analysis = append(sp.Analysis, fmt.Sprintf("traffic share verified (%d%%)", s.Traffic.Weight))
		}
		p.Steps = append(p.Steps, sp)
	}
	p.Notes = append(p.Notes, fleetNotes(ro, len(steps))...)
	if base != nil {
		p.Release = releaseOf(ro, tpl, base)
	}
	return p
}

// fleetNotes says what each spec.fleet.waitFor holds, in step order.
func fleetNotes(ro *v1alpha1.Rollout, steps int) []string {
	if ro.Spec.Fleet == nil {
		return nil
	}
	var out []string
	for _, w := range ro.Spec.Fleet.WaitFor {
		before := "the release"
		if b := ptr.Deref(w.BeforeStep, 1); int(b) > steps {
			before = "completion"
		} else if b > 1 {
			before = fmt.Sprintf("step %d", b)
		}
		who := w.Rollout
		if who == "" {
			who = ro.Namespace + "/" + ro.Name
		}
		until := "to complete the same images"
		if w.Step != nil {
			until = fmt.Sprintf("to reach step %d with the same images", *w.Step)
		}
		where := "cluster " + w.Cluster + "'s"
		if len(w.Clusters) > 0 {
			n := "all"
			if w.AtLeast != nil {
				n = "at least " + w.AtLeast.String()
			}
			where = fmt.Sprintf("%s of clusters %s for their", n, strings.Join(w.Clusters, ", "))
		}
		if w.BakeTime != nil {
			until += fmt.Sprintf(" and bake %s", w.BakeTime.Duration)
		}
		out = append(out, fmt.Sprintf("%s waits for %s %s %s (read from the status branch in Git)", before, where, who, until))
	}
	return out
}

// declaredReplicas is a step's replicas as written: a number of pods or a
// percentage (the traffic's when replicas follow it).
func declaredReplicas(st v1alpha1.CanaryStep) string {
	switch {
	case st.Replicas != nil:
		return st.Replicas.String()
	case st.Traffic != nil:
		return *st.Traffic
	}
	return "?"
}

// workloadIn finds the Rollout's workload in the files: its pod template
// and the number of pods it declares (-1 when unknown), with a note when
// the plan has to guess.
func workloadIn(set *manifestSet, ro *v1alpha1.Rollout, nodes int32) (*corev1.PodTemplateSpec, int32, string) {
	ref := ro.Spec.WorkloadRef
	m := set.find(ref.APIVersion, ref.Kind, ro.Namespace, ref.Name)
	if m == nil {
		return nil, -1, fmt.Sprintf("%s %s/%s is not in these files: steps show their replicas as declared", ref.Kind, ro.Namespace, ref.Name)
	}
	tpl, replicas, err := podTemplate(m)
	if err != nil {
		return nil, -1, fmt.Sprintf("%s: %v", m.source, err)
	}
	if ref.Kind == "DaemonSet" {
		if nodes <= 0 {
			return tpl, -1, "a DaemonSet runs one pod per node: steps show their replicas as declared (pass --nodes to count pods)"
		}
		return tpl, nodes, ""
	}
	return tpl, replicas, ""
}

// podTemplate decodes a Deployment, StatefulSet or DaemonSet: its pod
// template and declared replicas (the API server's default of 1 when
// unset).
func podTemplate(m *manifest) (*corev1.PodTemplateSpec, int32, error) {
	one := func(r *int32) int32 {
		if r == nil {
			return 1
		}
		return *r
	}
	conv := runtime.DefaultUnstructuredConverter
	switch m.obj.GetKind() {
	case "Deployment":
		var d appsv1.Deployment
		if err := conv.FromUnstructured(m.obj.Object, &d); err != nil {
			return nil, 0, err
		}
		return &d.Spec.Template, one(d.Spec.Replicas), nil
	case "StatefulSet":
		var s appsv1.StatefulSet
		if err := conv.FromUnstructured(m.obj.Object, &s); err != nil {
			return nil, 0, err
		}
		return &s.Spec.Template, one(s.Spec.Replicas), nil
	case "DaemonSet":
		var d appsv1.DaemonSet
		if err := conv.FromUnstructured(m.obj.Object, &d); err != nil {
			return nil, 0, err
		}
		return &d.Spec.Template, 0, nil
	}
	return nil, 0, fmt.Errorf("kind %s is not a Deployment, StatefulSet or DaemonSet", m.obj.GetKind())
}

// releaseOf compares the workload's pod template with the base's: a
// release starts when it changed.
func releaseOf(ro *v1alpha1.Rollout, tpl *corev1.PodTemplateSpec, base *manifestSet) *releaseChange {
	ref := ro.Spec.WorkloadRef
	if tpl == nil {
		return &releaseChange{Reason: "unknown: the workload is not in these files"}
	}
	m := base.find(ref.APIVersion, ref.Kind, ro.Namespace, ref.Name)
	if m == nil {
		return &releaseChange{Reason: "new workload: it starts at this version, nothing to release"}
	}
	old, _, err := podTemplate(m)
	if err != nil {
		return &releaseChange{Reason: "unknown: " + err.Error()}
	}
	if workload.Revision(old) == workload.Revision(tpl) {
		return &releaseChange{Reason: "no release: the pod template is unchanged"}
	}
	c := &releaseChange{Releases: true, Reason: "releases: the pod template changed"}
	oldImages := map[string]string{}
	for _, ct := range append(old.Spec.InitContainers, old.Spec.Containers...) {
		oldImages[ct.Name] = ct.Image
	}
	for _, ct := range append(tpl.Spec.InitContainers, tpl.Spec.Containers...) {
		if was, ok := oldImages[ct.Name]; !ok || was != ct.Image {
			c.Images = append(c.Images, fmt.Sprintf("%s: %s -> %s", ct.Name, dash(was), ct.Image))
		}
	}
	sort.Strings(c.Images)
	return c
}
