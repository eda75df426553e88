package verdict

import (
	"errors"
	"fmt"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// MaxResults is how many MetricResults status.analysis can hold.
const MaxResults = 20

// ErrTooManyResults: the merged results do not fit in status.analysis.
var ErrTooManyResults = errors.New("too many metric results")

// MergeResults puts the results of the analysis of one step (0 for
// background) into status.analysis, replacing that step's entries. Merging
// a step's results also drops the entries of other steps, whose analyses
// are over; background entries always stay. The background analysis'
// counters must survive, so results that do not fit are an error, not
// silently dropped; status is then returned unchanged.
func MergeResults(status []v1alpha1.MetricResult, step int32, run []v1alpha1.MetricResult) ([]v1alpha1.MetricResult, error) {
	out := make([]v1alpha1.MetricResult, 0, len(status)+len(run))
	for _, r := range status {
		if r.Step != step && (r.Step == 0 || step == 0) {
			out = append(out, r)
		}
	}
	out = append(out, run...)
	if len(out) > MaxResults {
		return status, fmt.Errorf("%w: %d background and step metrics, status holds %d", ErrTooManyResults, len(out), MaxResults)
	}
	return out, nil
}
