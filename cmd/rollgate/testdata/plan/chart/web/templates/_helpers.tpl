{{- define "web.labels" -}}
app.kubernetes.io/name: {{ .Release.Name }}
{{- end }}
