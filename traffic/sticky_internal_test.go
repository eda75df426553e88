package traffic

import (
	"errors"
	"testing"
)

// TestCheckStickyOnlyWhereRequestsAreSplit: a TraefikService result that
// splits requests across two services must carry the session cookie
// trafficRoutings[].sticky asks for; one that sends every request to one
// service (the last step at 100%: the stable service at weight 0) splits
// nothing and passes without it.
func TestCheckStickyOnlyWhereRequestsAreSplit(t *testing.T) {
	spec := func(stable, canary any, cookie bool) objectState {
		w := map[string]any{"services": []any{
			map[string]any{"name": "web", "port": int64(80), "weight": stable},
			map[string]any{"name": "web-canary", "port": int64(80), "weight": canary},
		}}
		if cookie {
			w["sticky"] = map[string]any{"cookie": map[string]any{"name": "rg"}}
		}
		return objectState{Spec: map[string]any{"weighted": w}}
	}
	for _, tc := range []struct {
		name   string
		out    objectState
		weight int32
		refuse bool
	}{
		{"split without the cookie", spec(int64(80), int64(20), false), 20, true},
		{"split with the cookie", spec(int64(80), int64(20), true), 20, false},
		{"split, weights as floats", spec(80.0, 20.0, false), 20, true},
		{"everything to the canary", spec(int64(0), int64(100), false), 100, false},
		{"everything to the canary, float zero", spec(0.0, 100.0, false), 100, false},
	} {
		err := checkSticky(stickyKind, stickyGroup, tc.out, Desired{CanaryWeight: tc.weight, StickyCookie: "rg"})
		if refused := errors.Is(err, ErrInvalid); refused != tc.refuse {
			t.Errorf("%s: %v, want refused %v", tc.name, err, tc.refuse)
		}
	}
}
