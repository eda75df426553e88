package demo

import "fmt"

// The application the demo releases, as an application team keeps it in Git:
// one folder applied by a Flux Kustomization, with the Rollout next to the
// workload.
const (
	// Namespace of the application.
	Namespace = "demo"
	// App is the name of the Deployment, Service, HTTPRoute and Rollout.
	App = "echoserver"
	// RepoName is the Git repository (app.git on the demo's Git server).
	RepoName = "app"
	// Branch is the branch Flux applies and approvals are merged into.
	Branch = "main"
	// AppPath is the application folder in the repository.
	AppPath = "apps/echoserver"
	// OldImage and NewImage are the versions before and after the release.
	OldImage = "echo:1.0"
	NewImage = "echo:2.0"
	// StatusBranch is where rollgate writes progress.
	StatusBranch = "rollgate/status"
	// ControllerNamespace is the rollgate controller's namespace.
	ControllerNamespace = "rollgate-system"
	// FluxNamespace is the runtime namespace of the Flux controllers and
	// of the GitRepository and Kustomization.
	FluxNamespace = "flux-system"
)

const (
	deploymentFile = AppPath + "/deployment.yaml"
	rolloutFile    = AppPath + "/rollout.yaml"
)

// deploymentYAML is the workload with its Service and HTTPRoute; the image
// is what a developer changes to release.
func deploymentYAML(image string) string {
	return workloadYAML("5", image) + serviceAndRouteYAML
}

// workloadYAML is the Deployment alone, its replicas and image as given:
// values, or a chart's template expressions.
func workloadYAML(replicas, image string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: echoserver
spec:
  replicas: %s
  selector:
    matchLabels: {app: echoserver}
  template:
    metadata:
      labels: {app: echoserver}
    spec:
      containers:
      - name: echoserver
        image: %s
        ports:
        - containerPort: 8080
`, replicas, image)
}

// serviceAndRouteYAML is the Service and the HTTPRoute of the workload, in
// the Deployment's file.
const serviceAndRouteYAML = `---
apiVersion: v1
kind: Service
metadata:
  name: echoserver
spec:
  selector: {app: echoserver}
  ports:
  - port: 80
    targetPort: 8080
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: echoserver
spec:
  parentRefs:
  - name: public
  rules:
  - backendRefs:
    - name: echoserver
      port: 80
`

// rolloutYAML releases the Deployment in three steps; the first is a manual
// gate, approved by merging the approval branch into main.
const rolloutYAML = `# Merging an approval branch adds an entry to spec.approvals below.
` + rolloutHead + `      - traffic: "20%"
        replicas: 1
        pause: {}            # a manual gate: merge the approval branch
      - traffic: "60%"
        replicas: "60%"
        pause: {duration: 5}
      - traffic: "100%"
        replicas: "100%"
` + rolloutTail

// rolloutHead and rolloutTail are what the demo's Rollouts share: the
// workload, and traffic through its Service and HTTPRoute with the manifest
// in Git at apps/echoserver/rollout.yaml.
const (
	rolloutHead = `apiVersion: rollgate.dev/v1alpha1
kind: Rollout
metadata:
  name: echoserver
spec:
  workloadRef:
    apiVersion: apps/v1
    kind: Deployment
    name: echoserver
  strategy:
    canary:
      steps:
`
	rolloutTail = `      trafficRoutings:
      - service: echoserver
        gracePeriodSeconds: 0
        gateway: {httpRouteName: echoserver}
  git:
    repository: app-repo
    path: apps/echoserver/rollout.yaml
`
)

// repositoryYAML is the rollgate Repository the Rollout writes progress to
// and reads approvals from: the same repository Flux applies.
func repositoryYAML(url string) string {
	return fmt.Sprintf(`apiVersion: rollgate.dev/v1alpha1
kind: Repository
metadata:
  name: app-repo
spec:
  url: %s
  branch: main
  interval: 2s
  status:
    branch: rollgate/status
    window: 1s
`, url)
}

const kustomizationYAML = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: demo
resources:
- deployment.yaml
- rollout.yaml
- repository.yaml
`

// appFiles are the files of the first commit. The Repository names the
// repository's own URL, which is known once the server runs.
func appFiles(url string) map[string]string {
	return map[string]string{
		deploymentFile:                  deploymentYAML(OldImage),
		rolloutFile:                     rolloutYAML,
		AppPath + "/repository.yaml":    repositoryYAML(url),
		AppPath + "/kustomization.yaml": kustomizationYAML,
		"README.md":                     "# app\n\nThe demo application, applied by Flux from ./apps/echoserver.\n",
	}
}

// fluxObjects are the GitRepository and Kustomization a platform team
// creates so that Flux applies the application folder.
func fluxObjects(url string) string {
	return gitRepositoryYAML(url) + `---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: echoserver
  namespace: flux-system
spec:
  interval: 5s
  retryInterval: 5s
  timeout: 1m
  prune: true
  path: ./apps/echoserver
  sourceRef:
    kind: GitRepository
    name: app
`
}

// gitRepositoryYAML is the GitRepository "app" of url, branch main, in
// flux-system, that the platform team creates for Flux.
func gitRepositoryYAML(url string) string {
	return fmt.Sprintf(`apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata:
  name: app
  namespace: flux-system
spec:
  interval: 5s
  timeout: 30s
  url: %s
  ref:
    branch: main
`, url)
}
