// Package argocd holds rollgate's resource customizations for Argo CD: the
// health check and the actions of the Rollout kind, written in Lua for
// Argo CD to run.
//
// The scripts are plain files laid out as in Argo CD's own
// resource_customizations folder:
//
//	rollgate.dev/Rollout/health.lua
//	rollgate.dev/Rollout/actions/discovery.lua
//	rollgate.dev/Rollout/actions/<action>/action.lua
//
// They are embedded here so that one source feeds the argocd-cm settings
// (Settings, ConfigMapData), the copy in docs/argocd.md (a test fails when
// that copy drifts from the files) and anything that installs them.
//
// The scripts run inside Argo CD, never inside rollgate: no product code
// imports this package. It sits beside the chart because, like the chart,
// it is something users install (docs/argocd.md says how).
//
// The tests run the scripts the way Argo CD does: a fresh Lua state with
// only the libraries Argo CD gives argocd-cm scripts, the live object as
// the global obj, and the returned table converted back through JSON with
// Argo CD's rules.
package argocd

import (
	"embed"
	"fmt"
	"strings"
)

//go:embed rollgate.dev
var scripts embed.FS

const (
	// Group is the API group the customizations apply to.
	Group = "rollgate.dev"
	// Kind is the kind the customizations apply to.
	Kind = "Rollout"

	// HealthKey is the argocd-cm key of the Rollout health check.
	HealthKey = "resource.customizations.health." + Group + "_" + Kind
	// ActionsKey is the argocd-cm key of the Rollout actions.
	ActionsKey = "resource.customizations.actions." + Group + "_" + Kind

	dir = Group + "/" + Kind
)

// Actions returns the names of the Rollout actions, in the order the
// settings list them.
func Actions() []string {
	return []string{"approve", "promote", "abort", "retry", "pause", "resume"}
}

// Health returns the health check script (health.lua).
func Health() string { return mustRead(dir + "/health.lua") }

// Discovery returns the action discovery script (actions/discovery.lua).
func Discovery() string { return mustRead(dir + "/actions/discovery.lua") }

// Action returns the script of the named action (actions/<name>/action.lua).
func Action(name string) (string, error) {
	b, err := scripts.ReadFile(dir + "/actions/" + name + "/action.lua")
	if err != nil {
		return "", fmt.Errorf("argocd: no Rollout action %q (known: %s)", name, strings.Join(Actions(), ", "))
	}
	return string(b), nil
}

// Settings returns the two argocd-cm entries that install the health check
// and the actions, keyed by HealthKey and ActionsKey. The actions value is
// the YAML document Argo CD expects under ActionsKey: discovery.lua and a
// list of definitions, each a name and its action.lua.
func Settings() map[string]string {
	var b strings.Builder
	b.WriteString("discovery.lua: |\n")
	b.WriteString(indent(Discovery(), 2))
	b.WriteString("definitions:\n")
	for _, name := range Actions() {
		script, err := Action(name)
		if err != nil {
			panic(err) // Actions and the embedded files are kept in step by the tests
		}
		b.WriteString("- name: " + name + "\n")
		b.WriteString("  action.lua: |\n")
		b.WriteString(indent(script, 4))
	}
	return map[string]string{HealthKey: Health(), ActionsKey: b.String()}
}

// ConfigMapData renders Settings as the data section of argocd-cm, ready to
// merge into it (kubectl patch configmap argocd-cm --type merge
// --patch-file) or to copy under the Argo CD Helm chart's configs.cm.
func ConfigMapData() string {
	s := Settings()
	var b strings.Builder
	b.WriteString("data:\n")
	for _, key := range []string{HealthKey, ActionsKey} {
		b.WriteString("  " + key + ": |\n")
		b.WriteString(indent(s[key], 4))
	}
	return b.String()
}

// indent prefixes every non-empty line of text with n spaces, for a YAML
// literal block. text ends with a newline, as the script files do.
func indent(text string, n int) string {
	pad := strings.Repeat(" ", n)
	lines := strings.SplitAfter(text, "\n")
	var b strings.Builder
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			b.WriteString(pad)
		}
		b.WriteString(l)
	}
	if !strings.HasSuffix(text, "\n") {
		b.WriteString("\n")
	}
	return b.String()
}

// mustRead reads an embedded file that the package always carries.
func mustRead(name string) string {
	b, err := scripts.ReadFile(name)
	if err != nil {
		panic(fmt.Sprintf("argocd: embedded script %s is missing: %v", name, err))
	}
	return string(b)
}
