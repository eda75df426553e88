package commitmsg_test

import (
	"bytes"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/gitsync/commitmsg"
)

// commitData is a status commit of two changed Rollouts (one waiting at a
// gate, one without a step) and one removed.
func commitData() gitsync.CommitData {
	at := time.Date(2026, 11, 25, 22, 30, 5, 0, time.FixedZone("CET", 3600))
	return gitsync.CommitData{
		Changed: []gitsync.RolloutState{
			{
				Namespace: "shop", Name: "cart", Phase: "Paused",
				Step:               gitsync.StepState{Current: 1, Total: 3, State: "Paused"},
				Stable:             gitsync.VersionState{Revision: "abc", Replicas: 3, ReadyReplicas: 3, TrafficPercent: 80, Images: []string{"cart:1"}},
				Canary:             gitsync.VersionState{Revision: "def", Replicas: 1, ReadyReplicas: 1, TrafficPercent: 20, Images: []string{"cart:2", "sidecar:1"}},
				Approvals:          []gitsync.Approval{{Revision: "def", Step: 1}},
				AwaitingApproval:   &gitsync.AwaitingApproval{Revision: "def", Step: 1, Branch: "rollgate/approve/cart", Since: at},
				LastTransitionTime: at,
				Message:            `waits for "approval" <& co>`,
				Git:                gitsync.GitInfo{Repository: "fleet", Branch: "main", Path: "apps/cart", Revision: "0123456"},
			},
			{Namespace: "shop", Name: "web", Phase: "Healthy"},
		},
		Removed: []string{"shop/old"},
	}
}

// TestMatchesTextTemplate runs templates that use every construct and
// predefined function of text/template, and the time methods, with both
// this package and text/template (missingkey=error, as gitsync used it):
// the messages are the same byte for byte.
func TestMatchesTextTemplate(t *testing.T) {
	templates := map[string]string{
		"default":        gitsync.DefaultStatusMessageTemplate,
		"text only":      "rollgate: status\n",
		"empty":          "",
		"fields":         `{{range .Changed}}{{.Namespace}}/{{.Name}} {{.Stable.Revision}}->{{.Canary.Revision}} {{.Canary.TrafficPercent}}% {{.Step}} {{.Canary.Images}}{{"\n"}}{{end}}`,
		"struct print":   `{{(index .Changed 0).Git}} {{(index .Changed 0).AwaitingApproval}} {{index .Changed 1}}`,
		"if else":        `{{range .Changed}}{{if .AwaitingApproval}}gate {{.AwaitingApproval.Step}}{{else if eq .Phase "Healthy"}}healthy{{else}}other{{end}};{{end}}`,
		"with":           `{{range .Changed}}{{with .AwaitingApproval}}{{.Branch}} since {{.Since}}{{else}}none{{end}};{{end}}`,
		"with else with": `{{with .Removed}}{{len .}} removed{{end}}{{with $x := 0}}no{{else with 1}}one{{end}}`,
		"range vars":     `{{range $i, $r := .Changed}}{{$i}}:{{$r.Name}}@{{$.Removed}} {{end}}{{range $r := .Removed}}[{{$r}}]{{end}}`,
		"range else":     `{{range .Changed}}{{range .Approvals}}{{.Revision}}/{{.Step}}{{else}}no approvals{{end}} {{end}}`,
		"range int":      `{{range 3}}{{.}}{{end}} {{range $i := len .Changed}}{{$i}}{{end}}`,
		"break continue": `{{range $i, $r := .Changed}}{{if eq $i 1}}{{break}}{{end}}{{if not $r.Step.Total}}{{continue}}{{end}}{{$r.Name}}{{end}}`,
		"variables":      `{{$n := 0}}{{range .Changed}}{{$n = len .Name}}{{end}}{{$n}} {{$m := "x"}}{{$m}}`,
		"pipelines":      `{{.Removed | len | printf "%d removed"}} {{"a" | printf "%s-%s" "b"}} {{(index .Changed 0).Name | html}}`,
		"printf":         `{{printf "%-6s|%5.1f|%x|%v|%q" "ab" 3.14159 255 true (index .Changed 0).Message}}`,
		"print println":  `{{print "a" 1 2 "b" 3.5}}{{println "x" 3}}`,
		"escapers":       `{{html (index .Changed 0).Message}}|{{js (index .Changed 0).Message}}|{{urlquery (index .Changed 0).Message "a b"}}`,
		"index slice":    `{{index .Removed 0}} {{index (index .Changed 0).Canary.Images 1}} {{slice "rollgate" 1 4}} {{slice (index .Changed 0).Canary.Images 1}} {{slice .Removed 0 1 1}}`,
		"comparisons":    `{{with index .Changed 0}}{{eq .Canary.Replicas 1}} {{ne .Step.Current 2}} {{lt .Canary.TrafficPercent 50}} {{le 20 .Canary.TrafficPercent}} {{gt .Stable.Replicas .Canary.Replicas}} {{ge 1.5 2.5}} {{eq .Phase "Paused" "Healthy"}} {{lt "a" "b"}}{{end}}`,
		"and or not":     `{{and 1 0 .Missing}} {{or 0 "" "x"}} {{and 1 "y"}} {{or 0 false}} {{not .Removed}} {{not ""}}`,
		"define":         `{{define "one"}}- {{.Name}}: {{.Phase}}{{"\n"}}{{end}}{{range .Changed}}{{template "one" .}}{{end}}{{template "none"}}{{define "none"}}~{{end}}`,
		"block":          `{{block "head" .}}{{len .Changed}} changed{{end}}`,
		"trim comments":  "{{- /* a comment */ -}}\n  {{ len .Changed -}}  \n  x {{- \"y\" }}",
		"numbers":        `{{1}} {{1.5}} {{0x1F}} {{'a'}} {{1e3}} {{-7}} {{printf "%T %T %T" 1 1.0 'a'}}`,
		"chain":          `{{(index .Changed 0).Git.Branch}} {{(index .Changed 0).Stable.Images}}`,
		"time methods":   `{{with index .Changed 0}}{{.LastTransitionTime.Format "2006-01-02T15:04:05Z07:00"}} {{.LastTransitionTime.UTC}} {{.LastTransitionTime.Unix}} {{.LastTransitionTime.IsZero}} {{.AwaitingApproval.Since.UTC.Format "15:04"}} {{.LastTransitionTime.String}}{{end}} {{(index .Changed 1).LastTransitionTime.IsZero}} {{"2006" | (index .Changed 0).LastTransitionTime.Format}}`,
		"nil pointer ok": `{{range .Changed}}{{if .AwaitingApproval}}{{.AwaitingApproval.PullRequestURL}}{{end}}{{.AwaitingApproval}};{{end}}`,
	}
	for name, text := range templates {
		t.Run(name, func(t *testing.T) {
			want, wantErr := stdlib(text, commitData())
			if wantErr != nil {
				t.Fatalf("text/template: %v", wantErr)
			}
			got, err := execute(text, commitData())
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("error %v, text/template's %v", err, wantErr)
			}
			if got != want {
				t.Errorf("message differs from text/template's\n got: %q\nwant: %q", got, want)
			}
		})
	}
}

// TestFailsWhereTextTemplateFails: a template that text/template refuses
// at run time fails here too, naming the same thing.
func TestFailsWhereTextTemplateFails(t *testing.T) {
	for _, c := range []struct{ text, says string }{
		{`{{.Nope}}`, "can't evaluate field Nope"},
		{`{{range .Changed}}{{.AwaitingApproval.Since}}{{end}}`, "nil pointer evaluating *gitsync.AwaitingApproval.Since"},
		{`{{index .Removed 5}}`, "index out of range: 5"},
		{`{{lt (index .Changed 0).Phase 1}}`, "incompatible types for comparison"},
		{`{{len 3}}`, "len of type int"},
		{`{{template "missing"}}`, `template "missing" not defined`},
		{`{{(index .Changed 0).Name 1}}`, "Name has arguments but cannot be invoked as function"},
		{`{{1 2}}`, "can't give argument to non-function 1"},
	} {
		_, wantErr := stdlib(c.text, commitData())
		if wantErr == nil {
			t.Fatalf("%s: text/template does not fail", c.text)
		}
		_, err := execute(c.text, commitData())
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: error %v, want one saying %q (text/template: %v)", c.text, err, c.says, wantErr)
		}
	}
}

// TestMissingMapKeyIsAnError: missing keys are errors, as with
// text/template's missingkey=error.
func TestMissingMapKeyIsAnError(t *testing.T) {
	data := map[string]any{"a": map[string]int{"b": 1}}
	if got, err := execute(`{{.a.b}}`, data); err != nil || got != "1" {
		t.Errorf("{{.a.b}}: %q, %v; want 1", got, err)
	}
	_, err := execute(`{{.a.c}}`, data)
	if err == nil || !strings.Contains(err.Error(), `map has no entry for key "c"`) {
		t.Errorf("{{.a.c}}: error %v, want the missing key named", err)
	}
}

// TestOtherMethodsAreRefused: methods other than the time formatting ones
// are not called; the error says which ones a template can call.
func TestOtherMethodsAreRefused(t *testing.T) {
	_, err := execute(`{{(index .Changed 0).LastTransitionTime.Weekday}}`, commitData())
	if err == nil || !strings.Contains(err.Error(), "can't call method Weekday of time.Time: a message template can call Format, UTC, Unix, IsZero and String") {
		t.Errorf("error %v, want the method named and the ones allowed", err)
	}
}

// TestParseErrors are text/template's.
func TestParseErrors(t *testing.T) {
	for _, text := range []string{`{{.Changed`, `{{if 1}}x`, `{{nofunc 1}}`, `{{break}}`} {
		_, want := template.New("m").Parse(text)
		_, err := commitmsg.Parse("m", text)
		if err == nil || want == nil || err.Error() != want.Error() {
			t.Errorf("%s: error %v, want text/template's %v", text, err, want)
		}
	}
}

func stdlib(text string, data any) (string, error) {
	tmpl, err := template.New("m").Option("missingkey=error").Parse(text)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	err = tmpl.Execute(&b, data)
	return b.String(), err
}

func execute(text string, data any) (string, error) {
	tmpl, err := commitmsg.Parse("m", text)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	err = tmpl.Execute(&b, data)
	return b.String(), err
}
