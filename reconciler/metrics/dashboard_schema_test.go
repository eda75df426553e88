package metrics_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// TestDashboardGrafanaSchema decodes the shipped dashboard with Grafana's
// published dashboard schema types (grafana-foundation-sdk) strictly: an
// unknown field, a wrong type, a missing required field or an unknown panel
// type fails, named by the panel's title.
func TestDashboardGrafanaSchema(t *testing.T) {
	data, err := os.ReadFile(dashboardPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range grafanaSchemaProblems(data) {
		t.Errorf("%s: %s", dashboardPath(), problem)
	}
}

// TestDashboardGrafanaSchemaRefusesBrokenCopies breaks a copy of the
// dashboard in one way per case and expects the check to name the panel and
// what is wrong.
func TestDashboardGrafanaSchemaRefusesBrokenCopies(t *testing.T) {
	data, err := os.ReadFile(dashboardPath())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		panel string // title of the panel broken; "" for the dashboard itself
		edit  func(t *testing.T, panel map[string]any)
		want  string
	}{{
		name:  "misspelt field in a panel's options",
		panel: "Canary weight",
		edit: func(t *testing.T, p map[string]any) {
			legend := object(t, object(t, p, "options"), "legend")
			legend["displayMod"] = legend["displayMode"]
			delete(legend, "displayMode")
		},
		want: `panel "Canary weight": options.legend.VizLegendOptions: unexpected field 'displayMod'`,
	}, {
		name:  "wrong type in a panel's options",
		panel: "Rollouts by phase",
		edit: func(t *testing.T, p map[string]any) {
			object(t, object(t, p, "options"), "reduceOptions")["calcs"] = "lastNotNull"
		},
		want: `panel "Rollouts by phase": options.reduceOptions.calcs: json: cannot unmarshal string`,
	}, {
		name:  "misspelt field in a panel's field config",
		panel: "Step duration p50 / p95",
		edit: func(t *testing.T, p map[string]any) {
			defaults := object(t, object(t, p, "fieldConfig"), "defaults")
			defaults["unti"] = defaults["unit"]
			delete(defaults, "unit")
		},
		want: `panel "Step duration p50 / p95": fieldConfig.defaults.FieldConfig: unexpected field 'unti'`,
	}, {
		name:  "misspelt field in a panel's custom field config",
		panel: "Canary weight",
		edit: func(t *testing.T, p map[string]any) {
			object(t, object(t, object(t, p, "fieldConfig"), "defaults"), "custom")["lineWidht"] = 1
		},
		want: `panel "Canary weight": fieldConfig.defaults.custom.GraphFieldConfig: unexpected field 'lineWidht'`,
	}, {
		name:  "wrong type in a panel's position",
		panel: "Releases by result",
		edit: func(t *testing.T, p map[string]any) {
			object(t, p, "gridPos")["w"] = "12"
		},
		want: `panel "Releases by result": gridPos.w: json: cannot unmarshal string`,
	}, {
		name:  "misspelt field in a query",
		panel: "Git operations by result",
		edit: func(t *testing.T, p map[string]any) {
			target := p["targets"].([]any)[0].(map[string]any)
			target["exprr"] = target["expr"]
			delete(target, "expr")
		},
		want: `panel "Git operations by result": targets[0].Dataquery: unexpected field 'exprr'`,
	}, {
		name:  "query of a datasource type the schema does not know",
		panel: "Lua evaluations failing",
		edit: func(t *testing.T, p map[string]any) {
			object(t, p, "datasource")["type"] = "promethues"
			object(t, p["targets"].([]any)[0].(map[string]any), "datasource")["type"] = "promethues"
		},
		want: `panel "Lua evaluations failing": targets[0]: no datasource type of the schema decodes this query`,
	}, {
		name:  "unknown panel type",
		panel: "Reconcile workers busy",
		edit: func(t *testing.T, p map[string]any) {
			p["type"] = "timeseriez"
		},
		want: `panel "Reconcile workers busy": type "timeseriez" is not a panel type of the schema`,
	}, {
		name: "misspelt field in the dashboard",
		edit: func(t *testing.T, d map[string]any) {
			d["schemaVersoin"] = d["schemaVersion"]
		},
		want: `dashboard: Dashboard: unexpected field 'schemaVersoin'`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var dash map[string]any
			if err := json.Unmarshal(data, &dash); err != nil {
				t.Fatal(err)
			}
			if tc.panel == "" {
				tc.edit(t, dash)
			} else {
				tc.edit(t, panelTitled(t, dash, tc.panel))
			}
			broken, err := json.MarshalIndent(dash, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "rollgate.json")
			if err := os.WriteFile(path, broken, 0o600); err != nil {
				t.Fatal(err)
			}
			read, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			problems := grafanaSchemaProblems(read)
			found := false
			for _, p := range problems {
				found = found || strings.Contains(p, tc.want)
				t.Log(p)
			}
			if !found {
				t.Errorf("the broken copy gave %d problems, none containing %q", len(problems), tc.want)
			}
			// The shipped dashboard has no problem (TestDashboardGrafanaSchema),
			// so every problem here is the one this case made.
			where := "dashboard: "
			if tc.panel != "" {
				where = fmt.Sprintf("panel %q: ", tc.panel)
			}
			for _, p := range problems {
				if !strings.HasPrefix(p, where) {
					t.Errorf("a problem outside %s: %s", strings.TrimSuffix(where, ": "), p)
				}
			}
		})
	}
}

// grafanaSchemaProblems decodes a dashboard with the grafana-foundation-sdk
// types strictly and returns what is wrong, each naming the panel it is in.
//
// The SDK's Dashboard.UnmarshalJSONStrict refuses unknown fields, wrong types
// and missing required fields in the dashboard, its rows, panels, template
// variables and annotations; a panel's options and fieldConfig.defaults.custom
// are decoded strictly by the panel type's registered variant, and its targets
// by the datasource type's. Where the SDK falls back to a loose decoding, this
// function closes the gap for the top-level panels: a panel type or a query
// with no registered variant is a problem, and a panel's fieldConfig is
// decoded strictly again (the SDK decodes all but its custom part loosely).
// Validate then checks the schema's constraints. Still loose, as the schema
// types them: the values of field overrides, a transformation's options and a
// query variable's query.
func grafanaSchemaProblems(data []byte) []string {
	plugins.RegisterDefaultPlugins()

	var titles struct {
		Panels []struct {
			Title string `json:"title"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &titles); err != nil {
		return []string{err.Error()}
	}
	names := make([]string, len(titles.Panels))
	for i, p := range titles.Panels {
		names[i] = fmt.Sprintf("panel %q", p.Title)
	}

	var problems []string
	// add names the panel of each error: by prefix, or by the error's path
	// when prefix is empty.
	add := func(prefix string, err error) {
		var errs cog.BuildErrors
		if !errors.As(err, &errs) {
			if prefix == "" {
				prefix = "dashboard: "
			}
			problems = append(problems, prefix+err.Error())
			return
		}
		for _, e := range errs {
			if prefix == "" {
				problems = append(problems, namePanel(e.Error(), names))
			} else {
				problems = append(problems, prefix+e.Error())
			}
		}
	}

	var dash dashboard.Dashboard
	if err := dash.UnmarshalJSONStrict(data); err != nil {
		add("", err)
	}
	if err := dash.Validate(); err != nil {
		add("", err)
	}

	var raw struct {
		Panels []struct {
			Type       string `json:"type"`
			Datasource struct {
				Type string `json:"type"`
			} `json:"datasource"`
			Targets     []json.RawMessage `json:"targets"`
			FieldConfig json.RawMessage   `json:"fieldConfig"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return append(problems, err.Error())
	}
	for i, p := range raw.Panels {
		if p.Type == "row" {
			continue
		}
		if _, ok := cog.ConfigForPanelcfgVariant(p.Type); !ok {
			problems = append(problems, fmt.Sprintf("%s: type %q is not a panel type of the schema", names[i], p.Type))
		}
		for j, target := range p.Targets {
			q, err := cog.StrictUnmarshalDataquery(target, p.Datasource.Type)
			if _, unknown := q.(variants.UnknownDataquery); err == nil && unknown {
				problems = append(problems, fmt.Sprintf("%s: targets[%d]: no datasource type of the schema decodes this query", names[i], j))
			}
		}
		if p.FieldConfig != nil {
			var fc dashboard.FieldConfigSource
			if err := fc.UnmarshalJSONStrict(p.FieldConfig); err != nil {
				add(names[i]+": fieldConfig.", err)
			}
		}
	}
	return problems
}

// panelIndex matches the path of a problem in the i-th panel.
var panelIndex = regexp.MustCompile(`^panels\[(\d+)\]\.`)

// namePanel replaces a leading "panels[i]." by the panel's title, and puts
// "dashboard: " before a problem outside the panels.
func namePanel(problem string, names []string) string {
	m := panelIndex.FindStringSubmatch(problem)
	if m == nil {
		return "dashboard: " + problem
	}
	i, err := strconv.Atoi(m[1])
	if err != nil || i >= len(names) {
		return problem
	}
	return names[i] + ": " + problem[len(m[0]):]
}

// panelTitled returns the top-level panel with this title.
func panelTitled(t *testing.T, dash map[string]any, title string) map[string]any {
	t.Helper()
	for _, p := range dash["panels"].([]any) {
		if p := p.(map[string]any); p["title"] == title {
			return p
		}
	}
	t.Fatalf("no panel titled %q", title)
	return nil
}

// object returns the JSON object under key.
func object(t *testing.T, m map[string]any, key string) map[string]any {
	t.Helper()
	o, ok := m[key].(map[string]any)
	if !ok {
		t.Fatalf("%q is not an object", key)
	}
	return o
}
