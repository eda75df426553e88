package demo

import (
	"fmt"
	"time"
)

// The application of the HelmRelease story, as a team that ships a Helm
// chart keeps it in Git: the chart (Deployment, Service, HTTPRoute and the
// Rollout) and its values file, which CI edits to release and which holds
// the approvals (docs/helm.md, "A chart's Rollout").
const (
	chartPath  = "charts/echoserver"
	valuesFile = chartPath + "/values.yaml"
	// helmTimeout is the HelmRelease's spec.timeout: short, so that a gate
	// outlasts it several times over.
	helmTimeout = 15 * time.Second
)

// valuesYAML is the chart's values file at image tag; the comments are the
// markers rollgate edits (a revert: the image; an approval: the list).
func valuesYAML(tag string) string {
	return fmt.Sprintf(`# Values of echoserver; CI changes image.tag to release.
replicaCount: 4
image:
  repository: echo # rollgate:image demo/echoserver:echoserver:name
  tag: "%s" # rollgate:image demo/echoserver:echoserver:tag
rollout:
  # Merged approval branches add their approval here; the chart renders
  # the list into the Rollout's spec.approvals.
  approvals: [] # rollgate:approvals demo/echoserver
`, tag)
}

// chartFiles are the chart's files at version 1.
func chartFiles() map[string]string {
	return map[string]string{
		chartPath + "/Chart.yaml":             "apiVersion: v2\nname: echoserver\nversion: 0.1.0\n",
		valuesFile:                            valuesYAML("1.0"),
		chartPath + "/templates/app.yaml":     chartAppYAML,
		chartPath + "/templates/rollout.yaml": chartRolloutYAML,
	}
}

// chartAppYAML is the workload, its Service and its HTTPRoute.
var chartAppYAML = workloadYAML("{{ .Values.replicaCount }}", `"{{ .Values.image.repository }}:{{ .Values.image.tag }}"`) + serviceAndRouteYAML

// chartRolloutYAML is the snippet of docs/helm.md: spec.git.path names the
// values file, and spec.approvals is rendered from the marked list.
const chartRolloutYAML = `apiVersion: rollgate.dev/v1alpha1
kind: Rollout
metadata:
  name: echoserver
spec:
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: echoserver}
  strategy:
    canary:
      steps:
      - {traffic: "25%", replicas: 1, pause: {}}
      - {traffic: "100%", replicas: "100%"}
      trafficRoutings:
      - service: echoserver
        gracePeriodSeconds: 0
        gateway: {httpRouteName: echoserver}
  git:
    repository: app-repo
    path: charts/echoserver/values.yaml
  approvals: {{- toYaml .Values.rollout.approvals | nindent 4 }}
`

// helmReleaseYAML is the platform's GitRepository and the team's
// HelmRelease: Flux's defaults, with remediation retries and drift
// detection switched on and a short timeout, and nothing from rollgate.
func helmReleaseYAML(url string) string {
	return gitRepositoryYAML(url) + fmt.Sprintf(`---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: echoserver
  namespace: demo
spec:
  interval: 5s
  timeout: %s
  chart:
    spec:
      chart: ./%s
      reconcileStrategy: Revision
      interval: 5s
      sourceRef: {kind: GitRepository, name: app, namespace: flux-system}
  install:
    remediation: {retries: 3}
  upgrade:
    remediation: {retries: 3, remediateLastFailure: true}
  driftDetection:
    mode: enabled
`, helmTimeout, chartPath)
}
