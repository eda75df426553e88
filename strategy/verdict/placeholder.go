package verdict

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// Facts are the Rollout's values that queries and URLs may reference as
// {{rollout.<name>}}.
type Facts struct {
	// Namespace is {{rollout.namespace}}.
	Namespace string
	// Name is {{rollout.name}}.
	Name string
	// CanaryRevision is {{rollout.canaryRevision}}.
	CanaryRevision string
	// StableRevision is {{rollout.stableRevision}}.
	StableRevision string
	// CanaryService is {{rollout.canaryService}}.
	CanaryService string
	// StableService is {{rollout.stableService}}.
	StableService string
	// Step is {{rollout.step}}: the 1-based step the release is at (for
	// a hook, the step it is declared on).
	Step string
}

// rolloutFields lists the {{rollout.*}} placeholders, for messages.
const rolloutFields = "namespace, name, canaryRevision, stableRevision, canaryService, stableService, step"

func (f Facts) lookup(field string) (string, bool) {
	switch field {
	case "namespace":
		return f.Namespace, true
	case "name":
		return f.Name, true
	case "canaryRevision":
		return f.CanaryRevision, true
	case "stableRevision":
		return f.StableRevision, true
	case "canaryService":
		return f.CanaryService, true
	case "stableService":
		return f.StableService, true
	case "step":
		return f.Step, true
	}
	return "", false
}

// ErrPlaceholder marks an unknown, unresolved or malformed placeholder.
var ErrPlaceholder = errors.New("bad placeholder")

// Placeholders returns the names inside {{ }} in s, such as "args.window"
// and "rollout.namespace", in order of appearance, with surrounding spaces
// trimmed. An unterminated "{{" is an error.
func Placeholders(s string) ([]string, error) {
	var names []string
	_, err := replace(s, func(name string) (string, error) {
		names = append(names, name)
		return "", nil
	})
	return names, err
}

// replace calls fn for each placeholder of s and substitutes its answer.
func replace(s string, fn func(name string) (string, error)) (string, error) {
	var b strings.Builder
	for {
		start := strings.Index(s, "{{")
		if start < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		end := strings.Index(s[start:], "}}")
		if end < 0 {
			return "", fmt.Errorf("%w: unterminated %q", ErrPlaceholder, truncate(s[start:], 40))
		}
		val, err := fn(strings.TrimSpace(s[start+2 : start+end]))
		if err != nil {
			return "", err
		}
		b.WriteString(s[:start])
		b.WriteString(val)
		s = s[start+end+2:]
	}
}

// CheckPlaceholders verifies that every placeholder in s is {{args.x}}
// for an x in args, or one of the {{rollout.*}} names.
func CheckPlaceholders(s string, args map[string]bool) error {
	names, err := Placeholders(s)
	if err != nil {
		return err
	}
	for _, n := range names {
		kind, field, _ := strings.Cut(n, ".")
		switch {
		case kind == "args" && args[field]:
		case kind == "args":
			return fmt.Errorf("%w: {{%s}}: the template has no arg %q", ErrPlaceholder, n, field)
		case kind == "rollout":
			if _, ok := (Facts{}).lookup(field); !ok {
				return fmt.Errorf("%w: unknown placeholder {{%s}} (rollout has %s)", ErrPlaceholder, n, rolloutFields)
			}
		default:
			return fmt.Errorf("%w: unknown placeholder {{%s}} (use {{args.<name>}} or {{rollout.<field>}})", ErrPlaceholder, n)
		}
	}
	return nil
}

// Expand replaces each {{args.x}} with args[x] and each {{rollout.f}} with
// the fact f. An unknown placeholder, or one whose value is empty (a
// Rollout without a canary Service, say), is an error naming it: an empty
// label value would silently select other series.
func Expand(s string, args map[string]string, facts Facts) (string, error) {
	return replace(s, func(name string) (string, error) { return resolve(name, args, facts) })
}

func resolve(name string, args map[string]string, facts Facts) (string, error) {
	kind, field, _ := strings.Cut(name, ".")
	var val string
	var ok bool
	switch kind {
	case "args":
		val, ok = args[field]
		if !ok {
			return "", fmt.Errorf("%w: {{%s}}: no arg %q", ErrPlaceholder, name, field)
		}
	case "rollout":
		val, ok = facts.lookup(field)
		if !ok {
			return "", fmt.Errorf("%w: unknown placeholder {{%s}} (rollout has %s)", ErrPlaceholder, name, rolloutFields)
		}
		if val == "" {
			return "", fmt.Errorf("%w: {{%s}} has no value for this rollout", ErrPlaceholder, name)
		}
	default:
		return "", fmt.Errorf("%w: unknown placeholder {{%s}} (use {{args.<name>}} or {{rollout.<field>}})", ErrPlaceholder, name)
	}
	return val, nil
}

// ErrMissingArg marks a template arg without default that the Rollout does
// not give.
var ErrMissingArg = errors.New("missing arg")

// ResolveArgs merges a template's args (defaults) with the Rollout's args
// (which win). Every template arg must end up with a value, else the error
// names each missing one. Rollout args the template does not declare are
// ignored: one RolloutAnalysis passes the same args to all its templates.
func ResolveArgs(template []v1alpha1.TemplateArg, given []v1alpha1.AnalysisArg) (map[string]string, error) {
	out := make(map[string]string, len(template))
	declared := make(map[string]bool, len(template))
	for _, a := range template {
		declared[a.Name] = true
		if a.Value != nil {
			out[a.Name] = *a.Value
		}
	}
	for _, a := range given {
		if declared[a.Name] {
			out[a.Name] = a.Value
		}
	}
	var errs []error
	for _, a := range template {
		if _, ok := out[a.Name]; !ok {
			errs = append(errs, fmt.Errorf("%w: arg %q has no default and the Rollout does not set it", ErrMissingArg, a.Name))
		}
	}
	return out, errors.Join(errs...)
}
