package demo

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// The application of the rollback story: the demo's, with an
// AnalysisTemplate next to it, a Rollout whose first step is judged by that
// analysis (no manual gate), and a Deployment manifest carrying the team's
// comments.
const (
	analysisFile      = AppPath + "/analysis.yaml"
	kustomizationFile = AppPath + "/kustomization.yaml"
	// errorRateQuery is the share of 5xx answers over the last 10 s.
	errorRateQuery = `sum(rate(http_requests_total{code="500"}[10s])) / sum(rate(http_requests_total[10s]))`
	// errorLimit is the error share the analysis tolerates.
	errorLimit = 0.05
	// analysisInterval and analysisFailureLimit are the template's: the
	// release fails at the (failureLimit+1)th failed measurement.
	analysisInterval     = time.Second
	analysisFailureLimit = 1
	// headerComment and replicasComment are the team's comments in the
	// Deployment manifest; a revert must keep them.
	headerComment   = "# echoserver: owned by the web team; CI bumps the image below."
	replicasComment = "# sized for peak traffic"
)

// teamDeployment is the demo's deployment.yaml as the team keeps it, with
// comments.
func teamDeployment(image string) string {
	return headerComment + "\n" +
		strings.Replace(deploymentYAML(image), "  replicas: 5\n", "  replicas: 5 "+replicasComment+"\n", 1)
}

// annotated adds an annotation to the Deployment's metadata: a harmless
// change a developer may commit at any time.
func annotated(manifest string) string {
	return strings.Replace(manifest, "kind: Deployment\nmetadata:\n  name: echoserver\n",
		"kind: Deployment\nmetadata:\n  name: echoserver\n  annotations: {team: web}\n", 1)
}

// analysedRolloutYAML releases one pod first and lets the analysis decide
// it; there is no gate, so a failure rolls back without anyone acting.
const analysedRolloutYAML = `# Step 1 is judged by the error-rate analysis; a failure rolls back at once.
` + rolloutHead + `      - traffic: "20%"
        replicas: 1
        analysis: {templates: [error-rate]}
      - traffic: "100%"
        replicas: "100%"
` + rolloutTail

// errorRateTemplate measures the error share every second from the
// Prometheus at promURL. count is high so that, without errors, the
// analysis is still running when the test raises the error rate.
func errorRateTemplate(promURL string) string {
	return fmt.Sprintf(`apiVersion: rollgate.dev/v1alpha1
kind: AnalysisTemplate
metadata:
  name: error-rate
spec:
  metrics:
  - name: error-rate
    interval: %s
    count: 600
    failureLimit: %d
    successCondition: "result[0] < %v"
    provider:
      prometheus:
        address: %q
        query: %q
        timeout: 5s
`, analysisInterval, analysisFailureLimit, errorLimit, promURL, errorRateQuery)
}

const analysedKustomizationYAML = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: demo
resources:
- deployment.yaml
- analysis.yaml
- rollout.yaml
- repository.yaml
`

// rollbackFiles are the story's files over the demo's first commit.
func rollbackFiles(promURL string) map[string]string {
	return map[string]string{
		deploymentFile:    teamDeployment(OldImage),
		rolloutFile:       analysedRolloutYAML,
		analysisFile:      errorRateTemplate(promURL),
		kustomizationFile: analysedKustomizationYAML,
	}
}

// errorRate asks Prometheus what the analysis asks: the error share, or
// NaN when there is no answer yet.
type errorRate struct{ api promv1.API }

func newErrorRate(promURL string) (*errorRate, error) {
	c, err := promapi.NewClient(promapi.Config{Address: promURL})
	if err != nil {
		return nil, err
	}
	return &errorRate{api: promv1.NewAPI(c)}, nil
}

func (e *errorRate) value(ctx context.Context) float64 {
	v, _, err := e.api.Query(ctx, errorRateQuery, time.Now())
	vec, ok := v.(model.Vector)
	if err != nil || !ok || len(vec) != 1 {
		return math.NaN()
	}
	return float64(vec[0].Value)
}
