package traffic

import (
	"context"
	"errors"
	"fmt"

	"github.com/rollgate/rollgate/luascripts"
)

// library returns the caller's script library, or a fresh one (which
// compiles each built-in script again).
func (o Options) library() *luascripts.Library {
	if o.Scripts != nil {
		return o.Scripts
	}
	return luascripts.NewLibrary()
}

// scriptTarget is the part of a script's input every step shares.
func scriptTarget(o Options, d Desired) luascripts.Target {
	return luascripts.Target{
		StableService:    d.StableService,
		CanaryService:    d.CanaryService,
		StableRevision:   d.StableRevision,
		CanaryRevision:   d.CanaryRevision,
		RevisionLabelKey: o.revisionLabel(),
		PatchPodMetadata: d.PatchPodMetadata,
	}
}

// scriptWeight is the weight scripts see: -1 when matches are set (they
// take precedence over the weight), else the weight.
func scriptWeight(d Desired) (int32, error) {
	if d.CanaryWeight < 0 || d.CanaryWeight > 100 {
		return 0, fmt.Errorf("%w: canary weight %d is not within 0-100", ErrInvalid, d.CanaryWeight)
	}
	if len(d.Matches) > 0 {
		return -1, nil
	}
	return d.CanaryWeight, nil
}

// ingressAnnotations runs the dialect script of classType on the canary
// Ingress's copied annotations and returns its annotations.
func ingressAnnotations(ctx context.Context, o Options, classType string, annotations map[string]string, d Desired) (map[string]string, error) {
	w, err := scriptWeight(d)
	if err != nil {
		return nil, err
	}
	lib := o.library()
	script, err := lib.ResolveIngress(classType, o.LuaOverrides)
	if err != nil {
		return nil, scriptError(err)
	}
	in := luascripts.IngressInput{
		Annotations: annotations, Weight: w, Matches: d.Matches,
		RequestHeaderModifier: d.RequestHeaderModifier,
		StableService:         d.StableService, CanaryService: d.CanaryService,
	}
	out, err := luascripts.Runner{Limits: o.Lua, Observe: o.LuaObserve, Pool: lib.Pool(), Memo: lib.Memo()}.RunIngress(ctx, script, in)
	if err != nil {
		return nil, scriptError(err)
	}
	return out, nil
}

// customScript runs the script of kind.group on a resource's original.
func customScript(ctx context.Context, o Options, kind, group string, original objectState, d Desired) (objectState, error) {
	w, err := scriptWeight(d)
	if err != nil {
		return objectState{}, err
	}
	script, err := o.library().Resolve(kind, group, o.LuaOverrides)
	if err != nil {
		return objectState{}, scriptError(err)
	}
	in := luascripts.CustomInput{
		Data: luascripts.ObjectData{
			Spec: original.Spec, Labels: original.Labels, Annotations: original.Annotations,
		},
		CanaryWeight: w, StableWeight: luascripts.StableWeight(w), Matches: d.Matches,
		RequestHeaderModifier: d.RequestHeaderModifier, MirrorPercent: d.MirrorPercent, StickyCookie: d.StickyCookie,
		Target: scriptTarget(o, d),
	}
	out, err := luascripts.Runner{Limits: o.Lua, Observe: o.LuaObserve, Pool: o.library().Pool()}.RunCustom(ctx, script, in)
	if err != nil {
		return objectState{}, scriptError(err)
	}
	return objectState{Spec: out.Spec, Labels: out.Labels, Annotations: out.Annotations}, nil
}

// routeScript is customScript for a step of a release. At a step that
// sends nothing to the canary (weight 0 without matches: the start of a
// release before its pods are ready, a 0% step, a rollback, an abort) the
// declared state is the answer and no script runs. A script could only
// make it worse there: one written as Kruise users write them names the
// canary with weight 0, and Traefik drops a whole TraefikService while one
// of its Services has no ready endpoint, weight 0 or not (seen on the
// real node: 559 requests answered 404 in 4 s at the start of a release);
// a broken script would hold a rollback.
func routeScript(ctx context.Context, o Options, kind, group string, declared objectState, d Desired) (objectState, error) {
	if !d.sendsToCanary() {
		return declared, nil
	}
	out, err := customScript(ctx, o, kind, group, declared, d)
	if err != nil {
		return out, err
	}
	return out, checkSticky(kind, group, out, d)
}

// Kind and group of the one custom resource that keeps sessions sticky.
const (
	stickyKind  = "TraefikService"
	stickyGroup = "traefik.io"
)

// checkSticky refuses the result of a TraefikService script that splits
// requests by weight without the sticky cookie trafficRoutings[].sticky
// asks for (a user's script that does not read obj.stickyCookie). A
// result that sends every request to one service (the last step at 100%)
// splits nothing and needs no cookie.
func checkSticky(kind, group string, out objectState, d Desired) error {
	if d.StickyCookie == "" || kind != stickyKind || group != stickyGroup || len(d.Matches) > 0 || d.CanaryWeight == 0 {
		return nil
	}
	weighted, _ := out.Spec["weighted"].(map[string]any)
	if splitsAcross(weighted) < 2 {
		return nil
	}
	sticky, _ := weighted["sticky"].(map[string]any)
	if _, ok := sticky["cookie"].(map[string]any); !ok {
		return fmt.Errorf("%w: the %s.%s script split requests without spec.weighted.sticky.cookie, which "+
			"trafficRoutings[].sticky asks for: have the script set it from obj.stickyCookie, or remove sticky", ErrInvalid, kind, group)
	}
	return nil
}

// splitsAcross counts the services of a weighted TraefikService spec that
// get requests: all but those whose weight is 0 (without a weight,
// Traefik gives 1).
func splitsAcross(weighted map[string]any) int {
	services, _ := weighted["services"].([]any)
	n := 0
	for _, s := range services {
		svc, _ := s.(map[string]any)
		if w, ok := svc["weight"]; !ok || fmt.Sprint(w) != "0" {
			n++
		}
	}
	return n
}

// scriptError classifies a luascripts error: a missing script or an
// invalid input is ErrInvalid (the configuration must change), anything
// else ErrScript. The luascripts error (with the script name and line) is
// kept in the chain.
func scriptError(err error) error {
	if errors.Is(err, luascripts.ErrNoScript) || errors.Is(err, luascripts.ErrInput) {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return fmt.Errorf("%w: %w", ErrScript, err)
}
