package dashboard

import (
	"html/template"
	"strings"
	"time"
)

var funcs = template.FuncMap{
	"stamp": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	},
	"redact": Redact,
	"join":   strings.Join,
	"dash": func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	},
}

// pageHTML is the whole page: no script, no external file; it reloads
// itself with a meta refresh.
const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
{{if .Refresh}}<meta http-equiv="refresh" content="{{.Refresh}}">{{end}}
<title>rollgate dashboard</title>
{{template "style"}}
</head>
<body>
<header><h1><a href="/">rollgate</a></h1>
<p>Read-only view of {{.Source}}; {{if .Namespace}}namespace <b>{{.Namespace}}</b>{{else}}every namespace{{end}}; read {{stamp .Read}}{{if .Refresh}}, reloads every {{.Refresh}}s{{end}}. JSON: <a href="/api/rollouts">/api/rollouts</a></p></header>
{{if not .Rollouts}}<p class="empty">No Rollout here.</p>{{end}}
{{range .Rollouts}}{{template "rollout" .}}{{end}}
</body>
</html>
{{define "style"}}<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1 a{color:inherit;text-decoration:none}
section.rollout{border:1px solid #ccc;border-radius:6px;padding:.8em 1em;margin:1em 0}
table{border-collapse:collapse;margin:.4em 0}
td,th{border-bottom:1px solid #eee;padding:.2em .6em;text-align:left;vertical-align:top}
.bar{display:flex;width:30em;max-width:100%;height:1.2em;border:1px solid #999}
.bar .stable{background:#7aa6d6}.bar .canary{background:#e0a040}
.gate{background:#fff4d6;padding:.4em .6em;border-left:4px solid #e0a040}
.Failed,.RolledBack,.RollingBack,.Error{color:#b00020}.Healthy,.Released,.Successful{color:#1b7a1b}
.msg{white-space:pre-wrap;font-family:monospace}
</style>{{end}}
{{define "rollout"}}<section class="rollout" id="{{.Namespace}}-{{.Name}}">
<h2><a href="/rollouts/{{.Namespace}}/{{.Name}}">{{.Namespace}}/{{.Name}}</a> <span class="{{.Phase}}">{{dash .Phase}}</span></h2>
<table>
<tr><th>step</th><td class="step">{{if .Steps}}{{.Step}}/{{.Steps}}{{else}}-{{end}}</td><th>state</th><td class="state {{.State}}">{{dash .State}}</td></tr>
<tr><th>stable</th><td>{{dash .Stable.Revision}}</td><td>{{.Stable.Weight}}% traffic</td><td>{{.Stable.Ready}}/{{.Stable.Replicas}} pods ready</td></tr>
<tr><th>canary</th><td>{{dash .Canary.Revision}}</td><td>{{.Canary.Weight}}% traffic</td><td>{{.Canary.Ready}}/{{.Canary.Replicas}} pods ready</td></tr>
</table>
<div class="bar" title="stable {{.Stable.Weight}}%, canary {{.Canary.Weight}}%"><div class="stable" style="width: {{.Stable.Weight}}%"></div><div class="canary" style="width: {{.Canary.Weight}}%"></div></div>
{{if .Traffic}}<p>traffic: {{.Traffic}}</p>{{end}}
{{with .Gate}}<p class="gate">Waiting at the gate of step {{.Step}}{{if gt .Attempt 1}} (attempt {{.Attempt}}){{end}} since {{stamp .Since}}:
{{if .PullRequestURL}}merge the pull request <a href="{{redact .PullRequestURL}}">{{redact .PullRequestURL}}</a>{{end}}
{{if .Branch}}approval branch <code>{{.Branch}}</code>{{end}}{{if .Reason}} ({{.Reason}}){{end}}</p>{{end}}
{{if .Message}}<p class="msg">{{.Message}}</p>{{end}}
{{if .RevertBranch}}<p>revert branch <code>{{.RevertBranch}}</code>{{if .RevertPullRequestURL}}, pull request <a href="{{redact .RevertPullRequestURL}}">{{redact .RevertPullRequestURL}}</a>{{end}}</p>{{end}}
{{if .Analysis}}<h3>Analysis</h3><table><tr><th>check</th><th>step</th><th>phase</th><th>last value</th><th>counts</th><th>message</th></tr>
{{range .Analysis}}<tr><td>{{.Name}}</td><td>{{if .Step}}{{.Step}}{{end}}</td><td class="{{.Phase}}">{{.Phase}}</td><td>{{.Value}}</td><td>{{.Counts}}</td><td>{{.Message}}</td></tr>
{{end}}</table>{{end}}
{{if .Conditions}}<h3>Conditions</h3><table><tr><th>type</th><th>status</th><th>reason</th><th>message</th></tr>
{{range .Conditions}}<tr><td>{{.Type}}</td><td>{{.Status}}</td><td>{{.Reason}}</td><td>{{.Message}}</td></tr>
{{end}}</table>{{end}}
{{if .Releases}}<h3>Releases (from Git)</h3><table><tr><th>revision</th><th>stable</th><th>images</th><th>first seen</th><th>outcome</th><th>ended</th><th>steps</th><th>gates</th></tr>
{{range .Releases}}<tr><td>{{.Revision}}</td><td>{{dash .Stable}}</td><td>{{join .Images ", "}}</td><td>{{stamp .FirstSeen}}</td><td class="{{.Outcome}}">{{.Outcome}}</td><td>{{stamp .Ended}}</td>
<td>{{range .Steps}}{{.Step}}/{{.Total}} {{join .States " > "}}<br>{{end}}</td>
<td>{{range .Gates}}step {{.Step}}: {{.How}}{{if .PullRequestURL}} <a href="{{redact .PullRequestURL}}">pull request</a>{{end}}<br>{{end}}</td></tr>
{{end}}</table>{{end}}
</section>{{end}}
{{define "error"}}<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>rollgate dashboard: {{.Code}}</title>{{template "style"}}</head>
<body><h1><a href="/">rollgate</a></h1><h2 class="Error">{{.Code}} {{.Status}}</h2><p class="msg">{{.Message}}</p></body></html>{{end}}
`
