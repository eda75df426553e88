package kruise

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// conversion is the conversion of one Kruise Rollout, in place.
type conversion struct {
	root     *yaml.RNode
	c        *Converter
	findings []Finding
	// gates counts the steps that wait for a human in the output.
	gates int
}

func (cv *conversion) add(field, action, why string) {
	cv.findings = append(cv.findings, Finding{Field: field, Action: action, Why: why})
}

// run converts the Rollout, in order: the version, metadata, status, the
// v1alpha1 names, the workload, the steps, then everything rollgate's
// schema does not know.
func (cv *conversion) run() error {
	root := cv.root.YNode()
	version := stringAt(cv.root, "apiVersion")
	switch version {
	case Group + "/v1alpha1", Group + "/v1beta1":
	default:
		return fmt.Errorf("apiVersion %s is not a Kruise Rollout version this converter knows (v1alpha1, v1beta1)", version)
	}
	_, v := mapGet(root, "apiVersion")
	v.Value, v.Style = "rollgate.dev/v1alpha1", 0
	cv.metadata()
	if removeKey(root, "status") {
		cv.add("status", "removed", "status is written by the controller")
	}
	_, spec := mapGet(root, "spec")
	if spec == nil || spec.Kind != yaml.MappingNode {
		return fmt.Errorf("spec is missing")
	}
	v1alpha1 := strings.HasSuffix(version, "/v1alpha1")
	if v1alpha1 {
		if err := cv.fromV1alpha1(spec); err != nil {
			return err
		}
	}
	if err := cv.checkWorkload(spec); err != nil {
		return err
	}
	if err := cv.rollingStyle(spec, v1alpha1); err != nil {
		return err
	}
	cv.steps(spec)
	cv.prune(spec, cv.c.schema.Properties["spec"], "spec")
	cv.addGit(spec)
	return nil
}

// metadata drops what the API server and Kruise wrote into metadata.
func (cv *conversion) metadata() {
	_, meta := mapGet(cv.root.YNode(), "metadata")
	if meta == nil {
		return
	}
	for _, k := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink", "finalizers"} {
		if removeKey(meta, k) {
			cv.add("metadata."+k, "removed", "written by the API server or the Kruise controller")
		}
	}
	_, ann := mapGet(meta, "annotations")
	if ann == nil {
		return
	}
	for _, k := range keys(ann) {
		why := ""
		switch {
		case k == "rollouts.kruise.io/rollback-in-batch":
			why = "rollgate has no rollback in batches: reverting the workload sends traffic back to stable and returns every pod to the stable revision at once"
		case k == "rollouts.kruise.io/trafficrouting":
			why = "rollgate has no TrafficRouting resource: declare the routing in spec.strategy.canary.trafficRoutings"
		case k == rollingStyleAnnotation:
			continue // rollingStyle reads it, then removes it
		case strings.HasPrefix(k, Group+"/"):
			why = "Kruise's own bookkeeping"
		case k == "kubectl.kubernetes.io/last-applied-configuration":
			why = "it describes the Kruise object"
		default:
			continue
		}
		removeKey(ann, k)
		cv.add("metadata.annotations."+k, "removed", why)
	}
	if len(ann.Content) == 0 {
		removeKey(meta, "annotations")
	}
}

// fromV1alpha1 renames the fields v1beta1 renamed: objectRef.workloadRef
// and a step's weight; rolloutID has no counterpart.
func (cv *conversion) fromV1alpha1(spec *yaml.Node) error {
	_, ref := mapGet(spec, "objectRef")
	if ref != nil {
		_, wr := mapGet(ref, "workloadRef")
		if wr == nil {
			return fmt.Errorf("spec.objectRef has no workloadRef: only workloads can be converted")
		}
		k, _ := mapGet(spec, "objectRef")
		k.Value = "workloadRef"
		setValue(spec, "workloadRef", wr)
		cv.add("spec.objectRef.workloadRef", "renamed", "to spec.workloadRef, as in v1beta1")
	}
	if removeKey(spec, "rolloutID") {
		cv.add("spec.rolloutID", "removed", "rollgate has no rollout id: only a change of the pod template starts a release, whose id is <rollout>-<revision>")
	}
	for _, st := range []string{"canary", "blueGreen"} {
		for i, step := range stepNodes(spec, st) {
			k, w := mapGet(step, "weight")
			if k == nil {
				continue
			}
			field := fmt.Sprintf("spec.strategy.%s.steps[%d].weight", st, i)
			if _, t := mapGet(step, "traffic"); t != nil {
				removeKey(step, "weight")
				cv.add(field, "removed", "the step also sets traffic, which wins")
				continue
			}
			k.Value = "traffic"
			w.Value, w.Tag, w.Style = w.Value+"%", "!!str", yaml.DoubleQuotedStyle
			cv.add(field, "renamed", fmt.Sprintf("to traffic: %q", w.Value))
		}
	}
	return nil
}

// checkWorkload refuses workloads rollgate does not release.
func (cv *conversion) checkWorkload(spec *yaml.Node) error {
	_, wr := mapGet(spec, "workloadRef")
	if wr == nil {
		return fmt.Errorf("spec.workloadRef is missing")
	}
	api, kind := scalar(wr, "apiVersion"), scalar(wr, "kind")
	switch {
	case api != "apps/v1" || (kind != "Deployment" && kind != "StatefulSet" && kind != "DaemonSet"):
		return fmt.Errorf("spec.workloadRef: %s %s is not released by rollgate, which releases apps/v1 Deployments, StatefulSets and DaemonSets: keep this workload with Kruise", api, kind)
	case kind != "Deployment" && len(stepNodes(spec, "blueGreen")) > 0:
		return fmt.Errorf("spec.strategy.blueGreen: rollgate releases only Deployments blue-green, not a %s: use spec.strategy.canary", kind)
	}
	return nil
}

// steps keeps Kruise's gates. In Kruise a step whose pause has no
// duration waits for a human, and a step without a pause field (or with an
// empty one) has no duration, so it waits too; the one exception is the
// last canary step at replicas 100%, which finishes without waiting, its
// pause included. Blue-green has no exception: its last step waits for the
// human who confirms the switch. rollgate waits only where a step says
// pause: {}, so every such gate is written out and reported.
func (cv *conversion) steps(spec *yaml.Node) {
	for _, st := range []string{"canary", "blueGreen"} {
		steps := stepNodes(spec, st)
		for i, step := range steps {
			field := fmt.Sprintf("spec.strategy.%s.steps[%d]", st, i)
			cv.cookies(step, field)
			if st == "canary" && i == len(steps)-1 && stepReplicas(step) == "100%" {
				if removeKey(step, "pause") {
					cv.add(field+".pause", "removed", "Kruise finishes a last canary step at replicas 100% without waiting, whatever its pause says; rollgate would wait there")
				}
				continue
			}
			k, pause := mapGet(step, "pause")
			switch {
			case k == nil:
				setValue(step, "pause", emptyMap())
				cv.add(field+".pause", "added", fmt.Sprintf("step %d has no pause: Kruise waits there for a human (no duration is a manual pause); "+
					"rollgate waits only where a step says pause: {}, so the gate is written out", i+1))
			case pause.Kind != yaml.MappingNode:
				setValue(step, "pause", emptyMap())
				cv.add(field+".pause", "changed", fmt.Sprintf("step %d has an empty pause: Kruise waits there for a human; rollgate would read it as no pause and go on, so it is written as pause: {}", i+1))
			default:
				if _, d := mapGet(pause, "duration"); d != nil && d.Tag != nullTag {
					continue // a timed pause means the same in both
				}
				if removeKey(pause, "duration") {
					cv.add(field+".pause.duration", "removed", "a null duration: Kruise waits for a human, as rollgate does at pause: {}")
				}
				cv.add(field+".pause", "note", fmt.Sprintf("step %d is a gate: Kruise resumes it when its status is patched (kubectl-kruise rollout approve); rollgate opens it when spec.approvals approves it, written by merging the approval branch it pushes (with spec.git) or by rollgate approve", i+1))
			}
			cv.gates++
		}
	}
}

// nullTag is the tag of a YAML null.
const nullTag = "!!null"

// stepReplicas is a step's replicas as written; a v1alpha1 step without
// replicas gets its weight as a percentage in Kruise (fromV1alpha1 renamed
// it to traffic).
func stepReplicas(step *yaml.Node) string {
	if r := scalar(step, "replicas"); r != "" {
		return r
	}
	return scalar(step, "traffic")
}

// emptyMap is {}.
func emptyMap() *yaml.Node {
	return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: yaml.FlowStyle}
}

// rollingStyleAnnotation picks the rolling style of a v1alpha1 Rollout.
const rollingStyleAnnotation = Group + "/rolling-style"

// rollingStyle keeps Kruise's rolling style: a separate canary Deployment
// (canary style) or the workload released in place (partition style).
// Kruise releases only an apps/v1 Deployment in canary style, whatever the
// Rollout asks; v1alpha1 asks with the rolling-style annotation (none or
// "canary": canary style, "partition": in place), v1beta1 with
// enableExtraWorkloadForCanary. rollgate has the v1beta1 field, which it
// refuses for anything but a Deployment.
func (cv *conversion) rollingStyle(spec *yaml.Node, v1alpha1 bool) error {
	_, meta := mapGet(cv.root.YNode(), "metadata")
	_, ann := mapGet(meta, "annotations")
	_, style := mapGet(ann, rollingStyleAnnotation)
	_, wr := mapGet(spec, "workloadRef")
	kind := scalar(wr, "kind")
	deployment := scalar(wr, "apiVersion") == "apps/v1" && kind == "Deployment"
	_, strategy := mapGet(spec, "strategy")
	_, canary := mapGet(strategy, "canary")
	const field = "spec.strategy.canary.enableExtraWorkloadForCanary"
	ankey := "metadata.annotations." + rollingStyleAnnotation
	if !v1alpha1 {
		if style != nil {
			removeAnnotation(meta, rollingStyleAnnotation)
			cv.add(ankey, "removed", "Kruise v1beta1 does not read it: enableExtraWorkloadForCanary picks the rolling style, in Kruise as in rollgate")
		}
		if _, extra := mapGet(canary, "enableExtraWorkloadForCanary"); extra != nil && extra.Value == "true" && !deployment {
			removeKey(canary, "enableExtraWorkloadForCanary")
			cv.add(field, "removed", fmt.Sprintf("Kruise ignores it for a %s and releases it in place, as rollgate does; rollgate refuses the field for anything but a Deployment", kind))
		}
		return nil
	}
	value := ""
	if style != nil {
		value = style.Value
	}
	switch strings.ToLower(value) {
	case "", "canary":
	case "partition":
		removeAnnotation(meta, rollingStyleAnnotation)
		why := "in place (partition style), which is rollgate's style when enableExtraWorkloadForCanary is not set"
		if deployment {
			why += ": rollgate holds the Deployment and scales its ReplicaSets itself, where Kruise needs its Advanced Deployment controller"
		}
		cv.add(ankey, "removed", why)
		return nil
	default:
		return fmt.Errorf("%s: %q is not a rolling style Kruise accepts (canary, partition, or none): Kruise refuses this Rollout, so its style is unknown", ankey, value)
	}
	if canary == nil {
		return nil
	}
	said := "not set"
	if style != nil {
		said = fmt.Sprintf("%q", value)
		removeAnnotation(meta, rollingStyleAnnotation)
	}
	if !deployment {
		if style != nil {
			cv.add(ankey, "removed", fmt.Sprintf("%s: Kruise releases only a Deployment through a separate canary Deployment, so it releases this %s in place, as rollgate does", said, kind))
		}
		return nil
	}
	setValue(canary, "enableExtraWorkloadForCanary", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
	cv.add(field, "added", fmt.Sprintf("the rolling-style annotation is %s: Kruise v1alpha1 then releases the Deployment through a separate canary Deployment (canary style), "+
		"which rollgate does with enableExtraWorkloadForCanary: true; without it rollgate would release the Deployment in place", said))
	return nil
}

// removeAnnotation removes an annotation, and annotations when it was the
// last.
func removeAnnotation(meta *yaml.Node, key string) {
	_, ann := mapGet(meta, "annotations")
	removeKey(ann, key)
	if ann != nil && len(ann.Content) == 0 {
		removeKey(meta, "annotations")
	}
}

// cookieHeader is the header name Kruise's nginx script reads as a cookie
// match: its value names the cookie, whose value "always" selects the
// canary.
const cookieHeader = "canary-by-cookie"

// cookies turns Kruise's cookie matches into what they mean: a Cookie
// header holding <name>=always, which rollgate's Ingress dialects turn
// into their cookie rule.
func (cv *conversion) cookies(step *yaml.Node, field string) {
	_, matches := mapGet(step, "matches")
	if matches == nil || matches.Kind != yaml.SequenceNode {
		return
	}
	for i, m := range matches.Content {
		_, headers := mapGet(m, "headers")
		if headers == nil || headers.Kind != yaml.SequenceNode {
			continue
		}
		for j, h := range headers.Content {
			if !strings.EqualFold(scalar(h, "name"), cookieHeader) {
				continue
			}
			cookie := scalar(h, "value")
			re := fmt.Sprintf(`^(.*;\s*)?%s=always(;.*)?$`, regexp.QuoteMeta(cookie))
			setValue(h, "name", &yaml.Node{Kind: yaml.ScalarNode, Value: "Cookie"})
			setValue(h, "type", &yaml.Node{Kind: yaml.ScalarNode, Value: "RegularExpression"})
			setValue(h, "value", &yaml.Node{Kind: yaml.ScalarNode, Value: re, Style: yaml.SingleQuotedStyle})
			cv.add(fmt.Sprintf("%s.matches[%d].headers[%d]", field, i, j), "changed",
				fmt.Sprintf("Kruise's %s header match (cookie %s=always) becomes a Cookie header matching %s, which the Ingress dialects turn into their cookie rule", cookieHeader, cookie, re))
		}
	}
}

// prune removes the fields rollgate's schema s does not have, reporting
// each with what rollgate does instead.
func (cv *conversion) prune(n *yaml.Node, s apiextensionsv1.JSONSchemaProps, path string) {
	switch n.Kind {
	case yaml.MappingNode:
		if len(s.Properties) == 0 {
			return // a map or an object the schema keeps as is
		}
		for _, k := range keys(n) {
			prop, ok := s.Properties[k]
			if !ok {
				removeKey(n, k)
				cv.add(path+"."+k, "removed", whyRemoved(k))
				continue
			}
			_, v := mapGet(n, k)
			cv.prune(v, prop, path+"."+k)
		}
	case yaml.SequenceNode:
		if s.Items == nil || s.Items.Schema == nil {
			return
		}
		for i, item := range n.Content {
			cv.prune(item, *s.Items.Schema, fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

// whyRemoved says what rollgate does instead of a Kruise field.
func whyRemoved(field string) string {
	switch field {
	case "trafficRoutingRef":
		return "rollgate has no TrafficRouting resource: declare the routing in trafficRoutings"
	case "disableGenerateCanaryService":
		return "rollgate always routes the canary through the Service <service>-canary it creates"
	}
	return "rollgate's Rollout has no such field"
}

// addGit adds spec.git when a Repository was named, else says why one is
// worth adding.
func (cv *conversion) addGit(spec *yaml.Node) {
	gates := cv.gates > 0
	o := cv.c.opts
	switch {
	case o.GitRepository != "" && o.GitPath != "":
		git := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
		setValue(git, "repository", &yaml.Node{Kind: yaml.ScalarNode, Value: o.GitRepository})
		setValue(git, "path", &yaml.Node{Kind: yaml.ScalarNode, Value: o.GitPath})
		setValue(spec, "git", git)
		cv.add("spec.git", "changed", fmt.Sprintf("added: progress goes to Repository %s and gates open by merged pull requests on %s", o.GitRepository, o.GitPath))
	case gates:
		cv.add("spec.git", "note", "not set: gates can be approved in the cluster only (rollgate approve); add spec.git {repository, path} (or convert with --git-repository) to approve by merged pull requests")
	}
}

// stepNodes are the steps of the strategy st, if set.
func stepNodes(spec *yaml.Node, st string) []*yaml.Node {
	_, strategy := mapGet(spec, "strategy")
	_, s := mapGet(strategy, st)
	_, steps := mapGet(s, "steps")
	if steps == nil || steps.Kind != yaml.SequenceNode {
		return nil
	}
	return steps.Content
}

// mapGet returns the key and value nodes of key in mapping m, or nils
// (kyaml's RNode.Field).
func mapGet(m *yaml.Node, key string) (*yaml.Node, *yaml.Node) {
	if f := yaml.NewRNode(m).Field(key); f != nil {
		return f.Key.YNode(), f.Value.YNode()
	}
	return nil, nil
}

// scalar is the value of the scalar key of m, or "".
func scalar(m *yaml.Node, key string) string {
	if _, v := mapGet(m, key); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

// setValue sets key of mapping m to v, in place, or appends it.
func setValue(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, v)
}

// removeKey removes key from mapping m and reports whether it was there.
// A comment on the removed key moves to the next key.
func removeKey(m *yaml.Node, key string) bool {
	if m == nil || m.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != key {
			continue
		}
		if c := m.Content[i].HeadComment; c != "" && i+2 < len(m.Content) {
			next := m.Content[i+2]
			next.HeadComment = strings.TrimSpace(c + "\n" + next.HeadComment)
		}
		m.Content = append(m.Content[:i], m.Content[i+2:]...)
		return true
	}
	return false
}

// keys lists the keys of mapping m, sorted.
func keys(m *yaml.Node) []string {
	var out []string
	for i := 0; i+1 < len(m.Content); i += 2 {
		out = append(out, m.Content[i].Value)
	}
	sort.Strings(out)
	return out
}
