package admission_test

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/rollgate/rollgate/api/admission"
)

// rule is one x-kubernetes-validations rule of a CRD, where it sits.
type rule struct {
	kind, path, rule, message string
}

// key names a rule in the table of cases.
func (r rule) key() string { return r.kind + " " + r.path + ": " + r.rule }

// crdRules lists every x-kubernetes-validations rule of the chart's CRDs.
func crdRules(t *testing.T) []rule {
	t.Helper()
	crds, err := admission.ChartCRDs()
	if err != nil {
		t.Fatal(err)
	}
	var out []rule
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
				walkRules(crd.Spec.Names.Kind, "", v.Schema.OpenAPIV3Schema, &out)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

func walkRules(kind, path string, s *apiextensionsv1.JSONSchemaProps, out *[]rule) {
	for _, r := range s.XValidations {
		*out = append(*out, rule{kind: kind, path: path, rule: r.Rule, message: r.Message})
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := s.Properties[n]
		sub := n
		if path != "" {
			sub = path + "." + n
		}
		walkRules(kind, sub, &p, out)
	}
	if s.Items != nil && s.Items.Schema != nil {
		walkRules(kind, path+"[*]", s.Items.Schema, out)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		walkRules(kind, path+"[*]", s.AdditionalProperties.Schema, out)
	}
}

// Valid objects the cases break, one field at a time.
const (
	baseCanary = `
apiVersion: rollgate.dev/v1alpha1
kind: Rollout
metadata: {name: web, namespace: demo}
spec:
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  approvals: [{revision: abc, step: 1}]
  git: {repository: app, path: apps/web/rollout.yaml}
  progressDeadlineSeconds: 600
  strategy:
    canary:
      failureThreshold: 1
      steps:
      - {traffic: "5%", replicas: 1, pause: {}, matches: [{path: {type: PathPrefix, value: /beta}}]}
      - {traffic: "50%", replicas: "50%", pause: {duration: 10m}}
      - {traffic: "100%", replicas: "100%"}
      trafficRoutings:
      - {service: web, gracePeriodSeconds: 0, gateway: {httpRouteName: web}}
`
	baseBlueGreen = `
apiVersion: rollgate.dev/v1alpha1
kind: Rollout
metadata: {name: web, namespace: demo}
spec:
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  strategy:
    blueGreen:
      failureThreshold: "10%"
      steps:
      - {replicas: "100%", traffic: "0%", pause: {}, matches: [{headers: [{name: x-beta, value: "1"}]}]}
      - {replicas: "100%", traffic: "100%"}
      trafficRoutings:
      - {service: web, gateway: {httpRouteName: web}}
`
	baseTemplate = `
apiVersion: rollgate.dev/v1alpha1
kind: AnalysisTemplate
metadata: {name: success-rate, namespace: demo}
spec:
  metrics:
  - name: rate
    successCondition: "result[0] >= 0.99"
    provider:
      prometheus: {address: "http://prometheus:9090", query: "up", headers: [{name: Authorization, value: x}]}
`
	baseRepository = `
apiVersion: rollgate.dev/v1alpha1
kind: Repository
metadata: {name: app, namespace: demo}
spec: {url: "https://git.example.com/app.git", status: {path: rollgate}}
`
)

// hookCases break the rules of a hook (url or job), by message.
var hookCases = map[string]string{
	"a hook sets exactly one of url":                            "{name: h, url: 'http://h', job: {spec: {template: {spec: {containers: [{name: c, image: i}]}}}}}",
	"confirm is for url hooks":                                  "{name: h, confirm: true, job: {spec: {template: {spec: {containers: [{name: c, image: i}]}}}}}",
	"successCondition, headers and secretRef are for url hooks": "{name: h, successCondition: 'status == 200', job: {spec: {template: {spec: {containers: [{name: c, image: i}]}}}}}",
}

// ruleCase breaks one rule: base with edits (path=YAML value) applied;
// old, when set, makes it an update from base with those edits.
type ruleCase struct {
	kind, path, message string // the rule: its kind, schema path and the start of its message
	base                string
	edits, old          []string
	// shadowed, when set, says why no input can reach the rule: a schema
	// check before it refuses every input that would break it. The case
	// then shows the input is refused all the same.
	shadowed string
}

var pathMatchCases = map[string]string{
	"must not contain '#'":               "/a#b",
	"must not contain '%2F'":             "/a%2Fb",
	"must not contain '%2f'":             "/a%2fb",
	"must not contain '/../'":            "/a/../b",
	"must not contain '/./'":             "/a/./b",
	"must not contain '//'":              "/a//b",
	"must not end with '/.'":             "/a/.",
	"must not end with '/..'":            "/a/..",
	"must only contain valid characters": "/a b",
	"value must be an absolute path":     "a",
}

func ruleCases() []ruleCase {
	cs := []ruleCase{
		{"AnalysisTemplate", "spec.metrics[*].provider.prometheus.headers[*]", "header name is managed", baseTemplate,
			[]string{"spec.metrics[0].provider.prometheus.headers[0].name=Content-Type"}, nil, ""},
		{"AnalysisTemplate", "spec.metrics[*].provider.web.headers[*]", "header name is managed", baseTemplate,
			[]string{"spec.metrics[0].provider={web: {url: 'http://x', jsonPath: '{$.x}', headers: [{name: Connection, value: x}]}}"}, nil, ""},
		{"AnalysisTemplate", "spec.metrics[*].provider", "a metric provider must set exactly one", baseTemplate,
			[]string{"spec.metrics[0].provider={}"}, nil, ""},
		{"AnalysisTemplate", "spec.metrics[*]", "a metric needs successCondition", baseTemplate,
			[]string{"spec.metrics[0]={name: rate, provider: {prometheus: {address: 'http://p:9090', query: up}}}"}, nil, ""},
		{"Repository", "spec.status.path", "spec.status.path must be a relative", baseRepository,
			[]string{"spec.status.path=../up"}, nil, ""},
		{"Rollout", "spec.fleet.waitFor[*]", "spec.fleet.waitFor[].bakeTime counts from", baseCanary,
			[]string{"spec.fleet={waitFor: [{cluster: staging, step: 1, bakeTime: 1h}]}"}, nil, ""},
		{"Rollout", "spec.fleet.waitFor[*]", "a spec.fleet.waitFor entry names one cluster", baseCanary,
			[]string{"spec.fleet={waitFor: [{cluster: staging, clusters: [prod-eu]}]}"}, nil, ""},
		{"Rollout", "spec.fleet.waitFor[*]", "spec.fleet.waitFor[].atLeast counts the clusters", baseCanary,
			[]string{"spec.fleet={waitFor: [{cluster: staging, atLeast: 1}]}"}, nil, ""},
		{"Rollout", "spec.fleet.waitFor[*].atLeast", "atLeast must be a number of clusters", baseCanary,
			[]string{"spec.fleet={waitFor: [{clusters: ['prod-*'], atLeast: '0%'}]}"}, nil, ""},
		{"Repository", "spec.releaseRules.path", "spec.releaseRules.path is relative to the root", baseRepository,
			[]string{"spec.releaseRules={path: 'clusters/../freezes.yaml'}"}, nil, ""},
		{"Repository", "spec", "spec.approvals.reviews needs spec.forge", baseRepository,
			[]string{"spec.approvals={reviews: {minApprovals: 1, from: [alice]}}"}, nil, ""},
		{"Rollout", "spec.approvals[*].attempt", "attempts are numbered from 1", baseCanary, []string{"spec.approvals[0].attempt=0"}, nil, ""},
		{"Rollout", "spec.approvals[*].step", "steps are numbered from 1", baseCanary, []string{"spec.approvals[0].step=0"}, nil, ""},
		{"Rollout", "spec.git.path", "spec.git.path must be", baseCanary, []string{"spec.git.path=/abs/rollout.yaml"}, nil, ""},
		{"Rollout", "spec.progressDeadlineSeconds", "must be at least 1", baseCanary, []string{"spec.progressDeadlineSeconds=0"}, nil, ""},
		{"Rollout", "spec.strategy.onRollback[*].headers[*]", "header name is managed", baseCanary,
			[]string{"spec.strategy.onRollback=[{name: page, url: 'http://pager', headers: [{name: Connection, value: close}]}]"}, nil, ""},
		{"Rollout", "spec.strategy.onRollback[*]", "a hook sets exactly one of url", baseCanary, []string{"spec.strategy.onRollback=[" + hookCases["a hook sets exactly one of url"] + "]"}, nil, ""},
		{"Rollout", "spec.strategy.onRollback[*]", "confirm is for url hooks", baseCanary, []string{"spec.strategy.onRollback=[" + hookCases["confirm is for url hooks"] + "]"}, nil, ""},
		{"Rollout", "spec.strategy.onRollback[*]", "successCondition, headers and secretRef are for url hooks", baseCanary,
			[]string{"spec.strategy.onRollback=[" + hookCases["successCondition, headers and secretRef are for url hooks"] + "]"}, nil, ""},
		{"Rollout", "spec.retry.attempt", "must be 2 or more", baseCanary, []string{"spec.retry={revision: abc, attempt: 1}"}, nil, ""},
		{"Rollout", "spec.strategy", "spec.strategy must set exactly one", baseCanary,
			[]string{"spec.strategy.blueGreen={steps: [{replicas: 1}]}"}, nil, ""},
		{"Rollout", "spec.workloadRef", "spec.workloadRef is immutable", baseCanary,
			[]string{"spec.workloadRef.name=other"}, []string{}, ""},
		{"Rollout", "spec", "spec.strategy.blueGreen is only supported", baseBlueGreen,
			[]string{"spec.workloadRef.kind=StatefulSet"}, nil, ""},
		{"Rollout", "spec", "spec.fleet needs spec.git", baseBlueGreen,
			[]string{"spec.fleet={waitFor: [{cluster: staging}]}"}, nil, ""},
		{"Rollout", "spec", "spec.strategy.canary.enableExtraWorkloadForCanary", baseCanary,
			[]string{"spec.workloadRef.kind=DaemonSet", "spec.strategy.canary.enableExtraWorkloadForCanary=true"}, nil, ""},
	}
	for _, st := range []struct{ name, base string }{{"canary", baseCanary}, {"blueGreen", baseBlueGreen}} {
		p := "spec.strategy." + st.name
		add := func(path, msg string, edits ...string) {
			cs = append(cs, ruleCase{"Rollout", path, msg, st.base, edits, nil, ""})
		}
		add(p+".failureThreshold", "failureThreshold must be", p+".failureThreshold=101%")
		add(p+".steps[*].pause", "pause.duration must be", p+".steps[0].pause.duration=-5")
		add(p+".steps[*]", "replicas must be a number", p+".steps[0].replicas=0")
		add(p+".steps[*].traffic", "traffic must be a percentage", p+".steps[0].traffic='5'")
		add(p+".steps[*]", "each step needs replicas", p+".steps[0]={pause: {}}")
		add(p+".trafficRoutings[*].gracePeriodSeconds", "must be 0 or more", p+".trafficRoutings[0].gracePeriodSeconds=-1")
		add(p+".trafficRoutings[*]", "a trafficRoutings entry must set exactly one", p+".trafficRoutings[0].ingress={name: web}")
		add(p, p+".steps set traffic", p+".trafficRoutings=[]")
		add(p+".steps[*].mirror", "mirror must be a percentage", p+".steps[0]={replicas: 1, mirror: '0%'}")
		add(p+".steps[*]", "a mirror step answers every request", p+".steps[0]={replicas: 1, mirror: '20%', traffic: '5%'}")
		add(p+".steps[*]", "a mirror step needs replicas", p+".steps[0]={mirror: '20%'}")
		add(p, p+".steps set mirror", p+".steps=[{replicas: 1, mirror: '20%'}]", p+".trafficRoutings=[]")
		add(p, p+".steps[].replicas must not decrease", p+".steps=[{replicas: 3}, {replicas: 1}]")
		add(p, p+".steps[].replicas percentages", p+".steps=[{replicas: '50%'}, {replicas: '20%'}]")
		add(p+".steps[*].matches[*]", "a match needs at least one", p+".steps[0].matches=[{headers: []}]")
		add(p+".trafficRoutings[*].verify.prometheus.headers[*]", "header name is managed",
			p+".trafficRoutings[0].verify={prometheus: {address: 'http://p:9090', query: share, headers: [{name: Content-Length, value: '1'}]}}")
		for _, point := range []string{"before", "after"} {
			add(p+".steps[*].hooks."+point+"[*].headers[*]", "header name is managed",
				p+".steps[0].hooks={"+point+": [{name: h, url: 'http://h', headers: [{name: Content-Type, value: x}]}]}")
			for msg, hook := range hookCases {
				add(p+".steps[*].hooks."+point+"[*]", msg, p+".steps[0].hooks={"+point+": ["+hook+"]}")
			}
		}
		cs = append(cs, ruleCase{"Rollout", p + ".steps[*].matches[*].path", "type must be one of", st.base,
			[]string{p + ".steps[0].matches=[{path: {type: Glob, value: /a}}]"}, nil,
			"the enum of path.type refuses any other type first, and the API server skips CEL rules after an enum error"})
		for msg, value := range pathMatchCases {
			add(p+".steps[*].matches[*].path", msg, p+".steps[0].matches=[{path: {type: Exact, value: '"+value+"'}}]")
		}
	}
	return cs
}

// TestEveryCELRuleIsExercised breaks every x-kubernetes-validations rule
// of the chart's CRDs with one input and checks that validation refuses it
// with that rule's message. A rule without a case fails the test: add one
// when you add a rule.
func TestEveryCELRuleIsExercised(t *testing.T) {
	v, err := admission.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, base := range []string{baseCanary, baseBlueGreen, baseTemplate, baseRepository} {
		if errs := v.Validate(context.Background(), object(t, base, nil), nil); len(errs) > 0 {
			t.Fatalf("a base object is invalid: %v\n%s", errs, base)
		}
	}
	cases := ruleCases()
	for _, r := range crdRules(t) {
		var c *ruleCase
		for i := range cases {
			if cases[i].kind == r.kind && cases[i].path == r.path && strings.HasPrefix(r.message, cases[i].message) {
				c = &cases[i]
			}
		}
		if c == nil {
			t.Errorf("no case breaks rule %s (message %q): add one to ruleCases", r.key(), r.message)
			continue
		}
		obj := object(t, c.base, c.edits)
		var old *unstructured.Unstructured
		if c.old != nil {
			old = object(t, c.base, c.old)
		}
		errs := v.Validate(context.Background(), obj, old)
		if c.shadowed != "" {
			if len(errs) == 0 {
				t.Errorf("rule %s: edits %v were accepted", r.key(), c.edits)
			}
			t.Logf("rule %s is shadowed (%s): refused with %v", r.key(), c.shadowed, errs[0])
			continue
		}
		found := false
		for _, e := range errs {
			found = found || strings.Contains(e.Error(), r.message)
		}
		if !found {
			t.Errorf("rule %s: edits %v gave %v; want the rule's message %q", r.key(), c.edits, errs, r.message)
		}
	}
}

// object decodes base and applies edits "path=value" (value in YAML;
// path with [i] for list items).
func object(t *testing.T, base string, edits []string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(base), &u.Object); err != nil {
		t.Fatal(err)
	}
	for _, e := range edits {
		path, raw, _ := strings.Cut(e, "=")
		var val any
		if err := yaml.Unmarshal([]byte(raw), &val); err != nil {
			t.Fatalf("edit %q: %v", e, err)
		}
		if err := set(u.Object, path, val); err != nil {
			t.Fatalf("edit %q: %v", e, err)
		}
	}
	return u
}

var segment = regexp.MustCompile(`^([A-Za-z]+)(?:\[(\d+)\])?$`)

func set(obj map[string]any, path string, val any) error {
	parts := strings.Split(path, ".")
	var cur any = obj
	for i, p := range parts {
		m := segment.FindStringSubmatch(p)
		if m == nil {
			return fmt.Errorf("bad segment %q", p)
		}
		node, ok := cur.(map[string]any)
		if !ok {
			return fmt.Errorf("%s is not an object", p)
		}
		last := i == len(parts)-1
		if m[2] == "" {
			if last {
				node[m[1]] = val
				return nil
			}
			if node[m[1]] == nil {
				node[m[1]] = map[string]any{}
			}
			cur = node[m[1]]
			continue
		}
		list, _ := node[m[1]].([]any)
		idx, _ := strconv.Atoi(m[2])
		if idx >= len(list) {
			return fmt.Errorf("%s has no item %d", m[1], idx)
		}
		if last {
			list[idx] = val
			return nil
		}
		cur = list[idx]
	}
	return nil
}

// TestMirrorStepIsAccepted: a mirror step with replicas, followed by
// weighted steps, passes every rule.
func TestMirrorStepIsAccepted(t *testing.T) {
	v, err := admission.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ base, p string }{{baseCanary, "spec.strategy.canary"}, {baseBlueGreen, "spec.strategy.blueGreen"}} {
		obj := object(t, c.base, []string{c.p + ".steps[0]={replicas: 1, mirror: '30%', pause: {}}"})
		if errs := v.Validate(context.Background(), obj, nil); len(errs) > 0 {
			t.Errorf("%s: a mirror step refused: %v", c.p, errs)
		}
	}
}

// TestFleetWaitForms: a wait names one cluster or a share of a set of
// clusters (names or "*" patterns, atLeast a count or a percentage);
// anything else is refused.
func TestFleetWaitForms(t *testing.T) {
	v, err := admission.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		wait    string
		refused string // "" when accepted
	}{
		{"{cluster: staging, bakeTime: 1h}", ""},
		{"{clusters: [prod-eu, 'prod-us-*']}", ""},
		{"{clusters: ['prod-*'], atLeast: '10%', bakeTime: 10m}", ""},
		{"{clusters: [prod-eu-1, prod-eu-2, prod-eu-3], atLeast: 2, step: 1}", ""},
		{"{rollout: web}", "names one cluster (cluster) or a set"},
		{"{clusters: ['prod-*'], atLeast: 0}", "atLeast must be a number of clusters"},
		{"{clusters: ['prod-*'], atLeast: '101%'}", "atLeast must be a number of clusters"},
		{"{clusters: ['prod-*'], atLeast: '10'}", "atLeast must be a number of clusters"},
		{"{clusters: ['Prod_*']}", "should match"},
		{"{clusters: []}", "should have at least 1 items"},
	} {
		errs := v.Validate(context.Background(), object(t, baseCanary, []string{"spec.fleet={waitFor: [" + c.wait + "]}"}), nil)
		switch {
		case c.refused == "" && len(errs) > 0:
			t.Errorf("%s refused: %v", c.wait, errs)
		case c.refused != "" && !strings.Contains(fmt.Sprint(errs), c.refused):
			t.Errorf("%s: errors %v, want one saying %q", c.wait, errs, c.refused)
		}
	}
}
