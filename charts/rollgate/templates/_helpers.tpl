{{- define "rollgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "rollgate.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- /* A version with build metadata (Flux's reconcileStrategy Revision
packages 0.2.0+<commit>) is no label value: "+" becomes "_". */}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- define "rollgate.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /*
The pod selector of one controller Deployment: the chart's selector labels
for the main one; for a shard (.shard) labels of its own, so that no two
Deployments select the same pods.
*/ -}}
{{- define "rollgate.instanceSelectorLabels" -}}
{{- if .shard -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}-shard
app.kubernetes.io/instance: {{ .root.Release.Name }}
rollgate.dev/shard: {{ .shard }}
{{- else -}}
{{- include "rollgate.selectorLabels" .root -}}
{{- end -}}
{{- end -}}

{{- define "rollgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "rollgate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "rollgate.webhookCertSecret" -}}
{{- default (printf "%s-webhook-cert" (include "rollgate.fullname" .)) .Values.webhook.certSecretName -}}
{{- end -}}

{{- /*
The name of the release's cluster-scoped objects (ClusterRoles, bindings,
webhook configurations): the full name, or with watchAllNamespaces false
the full name and the release's namespace, so that releases of the same
name in several namespaces do not share them.
*/ -}}
{{- define "rollgate.clusterName" -}}
{{- if .Values.watchAllNamespaces -}}
{{- include "rollgate.fullname" . -}}
{{- else -}}
{{- printf "%s-%s" (include "rollgate.fullname" .) .Release.Namespace | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- /*
The namespaceSelector of every webhook: all namespaces, or with
watchAllNamespaces false the release's only (the controller writes the same).
*/ -}}
{{- define "rollgate.webhookNamespaceSelector" -}}
{{- if .Values.watchAllNamespaces -}}
namespaceSelector: {}
{{- else -}}
namespaceSelector:
    matchExpressions:
    - {key: kubernetes.io/metadata.name, operator: In, values: [{{ .Release.Namespace | quote }}]}
{{- end -}}
{{- end -}}

{{- /*
Checks of values that values.schema.json cannot express; each message names
the value and the way out. Included once, by deployment.yaml.

The controller container listens on four ports (8081 is the health probes'):
two values giving the same port would make the second listener fail to bind
and the pod crash-loop.
*/ -}}
{{- define "rollgate.checkValues" -}}
{{- $ports := list
      (list "metrics.port" (int .Values.metrics.port))
      (list "the health probes' port" 8081)
      (list "webhook.port" (int .Values.webhook.port))
      (list "git.webhookPort" (int .Values.git.webhookPort)) -}}
{{- range $i, $a := $ports }}
{{- range $j, $b := $ports }}
{{- if and (lt $i $j) (eq (index $a 1) (index $b 1)) }}
{{- fail (printf "%s (%d) is the same port as %s: the controller cannot listen twice on one port; give %s another port" (index $b 0) (index $b 1) (index $a 0) (index $b 0)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
