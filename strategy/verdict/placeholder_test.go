package verdict

import (
	"errors"
	"testing"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

func strp(s string) *string { return &s }

func TestExpand(t *testing.T) {
	facts := Facts{Namespace: "demo", Name: "echo", CanaryRevision: "7d9f", StableRevision: "5c4b", CanaryService: "echo-canary", StableService: "echo", Step: "2"}
	args := map[string]string{"window": "5m", "svc": "echo"}
	for _, tc := range []struct {
		name, in, want, err string
	}{
		{"no placeholder", `up{job="x"}`, `up{job="x"}`, ""},
		{"args and rollout", `rate(x{ns="{{rollout.namespace}}",svc="{{args.svc}}"}[{{ args.window }}])`, `rate(x{ns="demo",svc="echo"}[5m])`, ""},
		{"every rollout field", "{{rollout.name}} {{rollout.canaryRevision}} {{rollout.stableRevision}} {{rollout.canaryService}} {{rollout.stableService}} {{rollout.step}}", "echo 7d9f 5c4b echo-canary echo 2", ""},
		{"single braces untouched", `sum by (pod) (x{a="b"})`, `sum by (pod) (x{a="b"})`, ""},
		{"unknown arg", "{{args.nope}}", "", `{{args.nope}}: no arg "nope"`},
		{"unknown rollout field", "{{rollout.image}}", "", "unknown placeholder {{rollout.image}}"},
		{"unknown kind", "{{env.HOME}}", "", "unknown placeholder {{env.HOME}}"},
		{"unterminated", "x{{args.window", "", "unterminated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Expand(tc.in, args, facts)
			if tc.err != "" {
				if err == nil || !contains(err.Error(), tc.err) || !errors.Is(err, ErrPlaceholder) {
					t.Fatalf("Expand(%q) = %q, %v; want ErrPlaceholder with %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Expand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestExpandEmptyFactIsAnError(t *testing.T) {
	_, err := Expand(`x{service="{{rollout.canaryService}}"}`, nil, Facts{Namespace: "demo"})
	if err == nil || !contains(err.Error(), "{{rollout.canaryService}} has no value") {
		t.Fatalf("err = %v, want one saying canaryService has no value", err)
	}
}

func TestResolveArgs(t *testing.T) {
	tmpl := []v1alpha1.TemplateArg{{Name: "window", Value: strp("5m")}, {Name: "service"}, {Name: "quantile", Value: strp("0.99")}}
	got, err := ResolveArgs(tmpl, []v1alpha1.AnalysisArg{{Name: "service", Value: "echo"}, {Name: "window", Value: "1m"}, {Name: "other-template-arg", Value: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"window": "1m", "service": "echo", "quantile": "0.99"}
	if len(got) != len(want) {
		t.Fatalf("ResolveArgs = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("ResolveArgs = %v, want %v", got, want)
		}
	}
	_, err = ResolveArgs(tmpl, nil)
	if !errors.Is(err, ErrMissingArg) || !contains(err.Error(), `arg "service" has no default`) {
		t.Fatalf("missing arg: err = %v, want ErrMissingArg naming service", err)
	}
}
