// Package kruise converts OpenKruise Rollout manifests
// (rollouts.kruise.io v1alpha1 and v1beta1) into rollgate Rollouts, editing
// the YAML tree with kyaml so that comments and field order survive, and
// reports every field that does not map and why. What rollgate knows is
// decided by rollgate's own CRD schema: a field the schema does not have is
// removed and reported, never passed on for the API server to refuse.
package kruise

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// Group is the API group of OpenKruise Rollout.
const Group = "rollouts.kruise.io"

// Finding is one thing the conversion changed, dropped or wants the reader
// to know, at one field.
type Finding struct {
	// Field is the path in the Kruise manifest, such as
	// spec.strategy.canary.trafficRoutingRef.
	Field string `json:"field"`
	// Action is "removed", "renamed", "changed", "added" or "note".
	Action string `json:"action"`
	// Why says what rollgate does instead.
	Why string `json:"why"`
}

// Result is the conversion of one document.
type Result struct {
	// Doc is the 1-based document number in the input.
	Doc       int    `json:"doc"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Converted is false for a document left out of the output (see Err).
	Converted bool      `json:"converted"`
	Findings  []Finding `json:"findings,omitempty"`
	// Err says why a Kruise object could not be converted.
	Err string `json:"error,omitempty"`
}

// Options tune a conversion.
type Options struct {
	// GitRepository, when set, adds spec.git {repository, path: GitPath}
	// so that gates open by merged pull requests.
	GitRepository string
	// GitPath is where the converted file lives in the repository.
	GitPath string
}

// Converter converts with the schema of rollgate's Rollout.
type Converter struct {
	schema *apiextensionsv1.JSONSchemaProps
	opts   Options
}

// NewConverter returns a Converter for rollgate's Rollout CRD (from
// admission.ChartCRDs).
func NewConverter(crds []*apiextensionsv1.CustomResourceDefinition, opts Options) (*Converter, error) {
	for _, crd := range crds {
		if crd.Spec.Group != "rollgate.dev" || crd.Spec.Names.Kind != "Rollout" {
			continue
		}
		for _, v := range crd.Spec.Versions {
			if v.Name == "v1alpha1" && v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
				return &Converter{schema: v.Schema.OpenAPIV3Schema, opts: opts}, nil
			}
		}
	}
	return nil, errors.New("the Rollout CRD (rollgate.dev/v1alpha1) is not among the CRDs")
}

// ErrNothingToConvert: the input holds no OpenKruise object.
var ErrNothingToConvert = errors.New("nothing to convert")

// Convert converts every Kruise Rollout of a multi-document YAML stream
// and returns the stream with them replaced (other documents unchanged,
// other Kruise kinds left out) and a Result per Kruise object.
//
// A stream holding no Kruise object is ErrNothingToConvert, saying what it
// holds instead (nothing, or another project's Rollout).
func (c *Converter) Convert(src []byte) ([]byte, []Result, error) {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var docs []*yaml.Node
	var results []Result
	var others []string
	for i := 1; ; i++ {
		doc := &yaml.Node{}
		err := dec.Decode(doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", i, err)
		}
		root := yaml.NewRNode(doc)
		if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
			root = yaml.NewRNode(doc.Content[0])
		}
		group, _, _ := strings.Cut(stringAt(root, "apiVersion"), "/")
		if group != Group {
			if kind := stringAt(root, "kind"); kind == "Rollout" {
				others = append(others, fmt.Sprintf("document %d is a Rollout of %s", i, stringAt(root, "apiVersion")))
			}
			docs = append(docs, doc)
			continue
		}
		r := c.convertDoc(root)
		r.Doc = i
		if r.Converted {
			docs = append(docs, doc)
		}
		results = append(results, r)
	}
	if len(results) == 0 {
		why := "the input holds no object"
		if len(docs) > 0 {
			why = "the input holds no object of " + Group
		}
		if len(others) > 0 {
			why = strings.Join(others, "; ") + ", not of " + Group + " (an Argo Rollout is not converted)"
		}
		return nil, nil, fmt.Errorf("%w: %s", ErrNothingToConvert, why)
	}
	var out bytes.Buffer
	if len(docs) == 0 {
		return nil, results, nil // every Kruise object was left out: the report says why
	}
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	for _, d := range docs {
		if err := enc.Encode(d); err != nil {
			return nil, nil, err
		}
	}
	if err := enc.Close(); err != nil {
		return nil, nil, err
	}
	return out.Bytes(), results, nil
}

// convertDoc converts one Kruise object in place.
func (c *Converter) convertDoc(root *yaml.RNode) Result {
	r := Result{Kind: stringAt(root, "kind"), Namespace: stringAt(root, "metadata", "namespace"), Name: stringAt(root, "metadata", "name")}
	if r.Kind != "Rollout" {
		r.Err = fmt.Sprintf("rollgate has no %s%s", r.Kind, otherKind(r.Kind))
		return r
	}
	cv := &conversion{root: root, c: c}
	if err := cv.run(); err != nil {
		r.Err = err.Error()
		r.Findings = cv.findings
		return r
	}
	r.Converted, r.Findings = true, cv.findings
	return r
}

// otherKind says where a Kruise kind other than Rollout went.
func otherKind(kind string) string {
	switch kind {
	case "TrafficRouting":
		return ": declare the routing in the Rollout's spec.strategy.canary.trafficRoutings"
	case "BatchRelease":
		return ": it is Kruise's internal object, the Rollout carries the steps"
	case "RolloutHistory":
		return ": the status branch in Git keeps the history of releases"
	}
	return ""
}

// stringAt is the scalar at path, or "".
func stringAt(n *yaml.RNode, path ...string) string {
	v, err := n.Pipe(yaml.Lookup(path...))
	if err != nil || v == nil || v.YNode().Kind != yaml.ScalarNode {
		return ""
	}
	return v.YNode().Value
}

// Report prints results for people: per document, what was converted and
// every finding.
func Report(source string, results []Result) string {
	var b strings.Builder
	for _, r := range results {
		name := r.Name
		if r.Namespace != "" {
			name = r.Namespace + "/" + r.Name
		}
		state := "converted"
		if !r.Converted {
			state = "NOT converted: " + r.Err
		}
		fmt.Fprintf(&b, "%s:%d %s %s: %s\n", source, r.Doc, r.Kind, name, state)
		for _, f := range r.Findings {
			fmt.Fprintf(&b, "  %s %s: %s\n", f.Field, f.Action, f.Why)
		}
	}
	return b.String()
}
