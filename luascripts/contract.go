package luascripts

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// ObjectData is the part of a custom resource a script reads and returns:
// obj.data in Lua, and the result table {spec=..., labels=...,
// annotations=...}.
type ObjectData struct {
	Spec        map[string]any
	Labels      map[string]string
	Annotations map[string]string
}

// ObjectDataFrom takes spec, metadata.labels and metadata.annotations from
// an unstructured object's content. It shares the spec map with obj.
func ObjectDataFrom(obj map[string]any) (ObjectData, error) {
	var d ObjectData
	if spec, ok := obj["spec"]; ok && spec != nil {
		m, ok := spec.(map[string]any)
		if !ok {
			return d, fmt.Errorf("%w: spec is a %T, not an object", ErrInput, spec)
		}
		d.Spec = m
	}
	meta, _ := obj["metadata"].(map[string]any)
	var err error
	if d.Labels, err = stringMap(meta["labels"], "metadata.labels"); err != nil {
		return d, err
	}
	d.Annotations, err = stringMap(meta["annotations"], "metadata.annotations")
	return d, err
}

func stringMap(v any, path string) (map[string]string, error) {
	switch m := v.(type) {
	case nil:
		return nil, nil
	case map[string]string:
		return m, nil
	case map[string]any:
		out := make(map[string]string, len(m))
		for k, val := range m {
			s, ok := val.(string)
			if !ok {
				return nil, fmt.Errorf("%w: %s[%q] is a %T, not a string", ErrInput, path, k, val)
			}
			out[k] = s
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: %s is a %T, not an object", ErrInput, path, v)
}

// ApplyTo writes d into an unstructured object's content, in place: spec,
// metadata.labels and metadata.annotations (empty ones are removed).
func (d ObjectData) ApplyTo(obj map[string]any) {
	if d.Spec != nil {
		obj["spec"] = d.Spec
	} else {
		delete(obj, "spec")
	}
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	for field, m := range map[string]map[string]string{"labels": d.Labels, "annotations": d.Annotations} {
		if len(m) == 0 {
			delete(meta, field)
			continue
		}
		out := make(map[string]any, len(m))
		for k, v := range m {
			out[k] = v
		}
		meta[field] = out
	}
}

// Target says where traffic goes; it is the same for every step of a
// release.
type Target struct {
	// StableService is the Service of the stable revision (the Rollout's
	// trafficRoutings[].service).
	StableService string
	// CanaryService is the Service of the canary revision, normally
	// "<service>-canary". Equal to StableService when there is no canary
	// Service; scripts then route with subsets named "stable" and "canary".
	CanaryService string
	// StableRevision and CanaryRevision are the revisions' label values.
	StableRevision, CanaryRevision string
	// RevisionLabelKey is the pod label holding the revision:
	// pod-template-hash (Deployment) or controller-revision-hash.
	RevisionLabelKey string
	// PatchPodMetadata is the Rollout's patchPodTemplateMetadata.
	PatchPodMetadata *v1alpha1.PatchPodTemplateMetadata
}

// CustomInput is the obj global of a custom resource script.
type CustomInput struct {
	// Data is taken from the object as it was before the release (the
	// saved original), so every step starts from the same object.
	Data ObjectData
	// CanaryWeight is the step's traffic percentage (0-100), or -1 when
	// the step routes by matches or sets no traffic.
	CanaryWeight int32
	// StableWeight is 100-CanaryWeight (101 when CanaryWeight is -1, as in
	// Kruise Rollout).
	StableWeight int32
	// Matches of the step (A/B routing); types are defaulted as in the
	// Gateway API (PathPrefix "/", Exact).
	Matches []v1alpha1.HttpRouteMatch
	// RequestHeaderModifier of the step, or nil.
	RequestHeaderModifier *gatewayv1.HTTPHeaderFilter
	// MirrorPercent (1-100) is the share of requests a mirror step copies
	// to the canary while stable answers every one (CanaryWeight is then
	// 0); 0 when the step mirrors nothing. Scripts see it as obj.mirror
	// (nil when 0). A script that leaves the object unchanged at a mirror
	// step does not mirror: RunCustom refuses its result.
	MirrorPercent int32
	// StickyCookie names the session cookie that keeps a client on the
	// revision it first got (trafficRoutings[].sticky), or "". Scripts see
	// it as obj.stickyCookie (nil when "").
	StickyCookie string
	Target
}

// IngressInput is the obj global of an Ingress dialect script.
type IngressInput struct {
	// Annotations of the canary Ingress as created from the user's Ingress.
	// Pass the same map at every step, not the previous step's result, so
	// that steps are idempotent (scripts drop their own canary keys either
	// way, but derive some values, such as the ALB order, from the input).
	Annotations map[string]string
	// Weight is the step's traffic percentage, or -1 (see CanaryWeight).
	// Scripts see it as a string ("5", "-1"), as in Kruise Rollout.
	Weight int32
	// Matches of the step, defaulted as in CustomInput.
	Matches []v1alpha1.HttpRouteMatch
	// RequestHeaderModifier of the step, or nil.
	RequestHeaderModifier *gatewayv1.HTTPHeaderFilter
	// StableService and CanaryService as in Target.
	StableService, CanaryService string
}

// StepWeight is the canary weight of a step: -1 when it has matches
// (matches take precedence) or no traffic, else traffic as 0-100.
func StepWeight(step v1alpha1.TrafficRoutingStrategy) (int32, error) {
	if len(step.Matches) > 0 || step.Traffic == nil {
		return -1, nil
	}
	s := strings.TrimSpace(*step.Traffic)
	n, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
	if err != nil || !strings.HasSuffix(s, "%") || n < 0 || n > 100 {
		return 0, fmt.Errorf("%w: traffic %q is not a percentage from 0%% to 100%%", ErrInput, s)
	}
	return int32(n), nil
}

// StepMirror is the share of requests a step copies to the canary: mirror
// as 1-100, or 0 when the step does not mirror.
func StepMirror(step v1alpha1.TrafficRoutingStrategy) (int32, error) {
	if step.Mirror == nil {
		return 0, nil
	}
	s := strings.TrimSpace(*step.Mirror)
	n, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
	if err != nil || !strings.HasSuffix(s, "%") || n < 1 || n > 100 {
		return 0, fmt.Errorf("%w: mirror %q is not a percentage from 1%% to 100%%", ErrInput, s)
	}
	return int32(n), nil
}

// StableWeight is the stable weight scripts see for canary weight w:
// 100 - w, so 101 for the sentinel -1, exactly as Kruise Rollout computes it.
func StableWeight(w int32) int32 { return 100 - w }

// NewCustomInput builds the input of a custom resource script for one step.
func NewCustomInput(data ObjectData, step v1alpha1.TrafficRoutingStrategy, t Target) (CustomInput, error) {
	w, err := StepWeight(step)
	if err != nil {
		return CustomInput{}, err
	}
	m, err := StepMirror(step)
	if err != nil {
		return CustomInput{}, err
	}
	return CustomInput{
		Data: data, CanaryWeight: w, StableWeight: StableWeight(w), Matches: step.Matches,
		RequestHeaderModifier: step.RequestHeaderModifier, MirrorPercent: m, Target: t,
	}, nil
}

// NewIngressInput builds the input of an Ingress dialect script for one
// step.
func NewIngressInput(annotations map[string]string, step v1alpha1.TrafficRoutingStrategy, t Target) (IngressInput, error) {
	w, err := StepWeight(step)
	if err != nil {
		return IngressInput{}, err
	}
	return IngressInput{
		Annotations: annotations, Weight: w, Matches: step.Matches,
		RequestHeaderModifier: step.RequestHeaderModifier,
		StableService:         t.StableService, CanaryService: t.CanaryService,
	}, nil
}

// RunCustom runs a custom resource script and returns the new spec, labels
// and annotations. A built-in with a Go implementation runs that instead
// of its Lua script where it can (see native.go); the result is the same. Labels or annotations the script leaves out of its
// result stay as they were in in.Data. A result the routing guard refuses
// (see guard.go) is an error wrapping ErrMisroute. On error the caller
// must leave the resource untouched.
func (r Runner) RunCustom(ctx context.Context, s Script, in CustomInput) (ObjectData, error) {
	if s.native != nil {
		out, err := r.runNative(ctx, s, in)
		if err != errFallback {
			if err != nil {
				return ObjectData{}, err
			}
			if err := checkCustom(s, in, out); err != nil {
				return ObjectData{}, err
			}
			return out, nil
		}
	}
	v, err := r.run(ctx, s, in.encode, func(d *decoder, ret lua.LValue) (any, error) {
		return decodeCustom(d, ret, in.Data)
	})
	if err != nil {
		return ObjectData{}, err
	}
	out := v.(ObjectData)
	if err := checkCustom(s, in, out); err != nil {
		return ObjectData{}, err
	}
	return out, nil
}

// RunIngress runs an Ingress dialect script and returns the canary
// Ingress's new annotations. A result the routing guard refuses is an
// error wrapping ErrMisroute. On error the caller must leave the Ingress
// untouched.
func (r Runner) RunIngress(ctx context.Context, s Script, in IngressInput) (map[string]string, error) {
	key, memo := r.ingressMemoKey(s, in)
	if memo {
		if out, ok := r.Memo.ingress(key); ok {
			return out, nil
		}
	}
	v, err := r.run(ctx, s, in.encode, func(d *decoder, ret lua.LValue) (any, error) {
		if _, ok := ret.(*lua.LTable); !ok {
			return nil, fmt.Errorf("expected the annotations table, got %s", ret.Type())
		}
		return d.decodeStringMap(ret, "annotations")
	})
	if err != nil {
		return nil, err
	}
	out := v.(map[string]string)
	if err := checkIngress(s, in, out); err != nil {
		return nil, err
	}
	if memo {
		r.Memo.keepIngress(key, out)
	}
	return out, nil
}

// ingressMemoKey names the question RunIngress answers, false when its
// answer is not kept: no Memo, a Runner that prints (each run must print),
// a script not compiled, or an input over memoMaxInput.
func (r Runner) ingressMemoKey(s Script, in IngressInput) (memoKey, bool) {
	if r.Memo == nil || r.Print != nil || s.proto == nil {
		return memoKey{}, false
	}
	return ingressKey(s, in, r.Limits.withDefaults())
}

func decodeCustom(d *decoder, ret lua.LValue, orig ObjectData) (ObjectData, error) {
	t, ok := ret.(*lua.LTable)
	if !ok {
		return ObjectData{}, fmt.Errorf("expected a table {spec=..., labels=..., annotations=...}, got %s", ret.Type())
	}
	out := ObjectData{Labels: orig.Labels, Annotations: orig.Annotations}
	var err error
	t.ForEach(func(k, v lua.LValue) {
		if err != nil {
			return
		}
		switch k.String() {
		case "spec":
			var spec any
			if spec, err = d.decode(v, "spec", 0); err == nil {
				out.Spec, err = asObject(spec, "spec")
			}
		case "labels":
			out.Labels, err = d.decodeStringMap(v, "labels")
		case "annotations":
			out.Annotations, err = d.decodeStringMap(v, "annotations")
		default:
			err = fmt.Errorf("unknown key %q: the result holds only spec, labels and annotations", k.String())
		}
	})
	if err == nil && out.Spec == nil {
		err = fmt.Errorf("the result has no spec")
	}
	return out, err
}

func asObject(v any, path string) (map[string]any, error) {
	switch x := v.(type) {
	case map[string]any:
		return x, nil
	case emptyTable:
		return map[string]any{}, nil
	}
	return nil, fmt.Errorf("%s must be an object, got %T", path, v)
}

// encode builds the obj global in the shape Kruise Rollout passes to its
// scripts: what Kruise leaves out (empty labels, annotations, matches,
// headers, queryParams, header lists; no requestHeaderModifier) is nil,
// weights are numbers, and stableWeight is 100 - canaryWeight even for the
// -1 sentinel (so 101). Keys are set in sorted order, as for every map, so
// pairs() visits them in the same order on every run.
func (in CustomInput) encode(e *encoder) (lua.LValue, error) {
	data := e.L.CreateTable(0, 3)
	if len(in.Data.Annotations) > 0 {
		data.RawSetString("annotations", e.stringMap(in.Data.Annotations))
	}
	if len(in.Data.Labels) > 0 {
		data.RawSetString("labels", e.stringMap(in.Data.Labels))
	}
	if in.Data.Spec != nil {
		spec, err := e.encodeMap(in.Data.Spec, 2)
		if err != nil {
			return nil, under(under(under(err, ".spec"), ".data"), "obj")
		}
		data.RawSetString("spec", spec)
	}
	data.Metatable = e.m.object
	obj := e.L.CreateTable(0, 14)
	obj.RawSetString("canaryRevision", lua.LString(in.CanaryRevision))
	obj.RawSetString("canaryService", lua.LString(in.CanaryService))
	obj.RawSetString("canaryWeight", lua.LNumber(in.CanaryWeight))
	obj.RawSetString("data", data)
	if len(in.Matches) > 0 {
		obj.RawSetString("matches", e.matches(in.Matches))
	}
	if in.MirrorPercent > 0 {
		obj.RawSetString("mirror", lua.LNumber(in.MirrorPercent))
	}
	if in.StickyCookie != "" {
		obj.RawSetString("stickyCookie", lua.LString(in.StickyCookie))
	}
	if p := in.PatchPodMetadata; p != nil {
		meta := e.L.CreateTable(0, 2)
		meta.RawSetString("annotations", e.stringMap(p.Annotations))
		meta.RawSetString("labels", e.stringMap(p.Labels))
		meta.Metatable = e.m.object
		obj.RawSetString("patchPodMetadata", meta)
	}
	if in.RequestHeaderModifier != nil {
		obj.RawSetString("requestHeaderModifier", e.modifier(in.RequestHeaderModifier))
	}
	obj.RawSetString("revisionLabelKey", lua.LString(in.RevisionLabelKey))
	obj.RawSetString("stableRevision", lua.LString(in.StableRevision))
	obj.RawSetString("stableService", lua.LString(in.StableService))
	obj.RawSetString("stableWeight", lua.LNumber(in.StableWeight))
	obj.Metatable = e.m.object
	return obj, nil
}

// encode builds the obj global of an Ingress dialect in Kruise Rollout's
// shape: weight is a string ("-1" for no weight), empty annotations and
// matches are nil.
func (in IngressInput) encode(e *encoder) (lua.LValue, error) {
	obj := e.L.CreateTable(0, 6)
	if len(in.Annotations) > 0 {
		obj.RawSetString("annotations", e.stringMap(in.Annotations))
	}
	obj.RawSetString("canaryService", lua.LString(in.CanaryService))
	if len(in.Matches) > 0 {
		obj.RawSetString("matches", e.matches(in.Matches))
	}
	if in.RequestHeaderModifier != nil {
		obj.RawSetString("requestHeaderModifier", e.modifier(in.RequestHeaderModifier))
	}
	obj.RawSetString("stableService", lua.LString(in.StableService))
	obj.RawSetString("weight", lua.LString(strconv.Itoa(int(in.Weight))))
	obj.Metatable = e.m.object
	return obj, nil
}

// object returns a table marked as a JSON object with the given keys and
// values, which must come in sorted key order; nil values are left out.
func (e *encoder) object(kv ...any) *lua.LTable {
	t := e.L.CreateTable(0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		switch v := kv[i+1].(type) {
		case string:
			t.RawSetString(kv[i].(string), lua.LString(v))
		case *lua.LTable:
			if v != nil {
				t.RawSetString(kv[i].(string), v)
			}
		}
	}
	t.Metatable = e.m.object
	return t
}

// array returns tables as a table marked as a JSON list.
func (e *encoder) array(items []*lua.LTable) *lua.LTable {
	t := e.L.CreateTable(len(items), 0)
	for i, item := range items {
		t.RawSetInt(i+1, item)
	}
	t.Metatable = e.m.array
	return t
}

// matches encodes matches with the Gateway API defaults filled in (as the
// API server fills them in Kruise Rollout's CRD): path {type=PathPrefix,
// value="/"}, header and query type Exact; path, headers and queryParams
// are nil when the match has none.
func (e *encoder) matches(matches []v1alpha1.HttpRouteMatch) *lua.LTable {
	out := make([]*lua.LTable, 0, len(matches))
	for _, m := range matches {
		var path, headers, params *lua.LTable
		if p := m.Path; p != nil {
			typ, val := pathMatch(p)
			path = e.object("type", typ, "value", val)
		}
		if len(m.Headers) > 0 {
			list := make([]*lua.LTable, 0, len(m.Headers))
			for _, h := range m.Headers {
				typ := string(gatewayv1.HeaderMatchExact)
				if h.Type != nil {
					typ = string(*h.Type)
				}
				list = append(list, e.object("name", string(h.Name), "type", typ, "value", h.Value))
			}
			headers = e.array(list)
		}
		if len(m.QueryParams) > 0 {
			list := make([]*lua.LTable, 0, len(m.QueryParams))
			for _, q := range m.QueryParams {
				typ := string(gatewayv1.QueryParamMatchExact)
				if q.Type != nil {
					typ = string(*q.Type)
				}
				list = append(list, e.object("name", string(q.Name), "type", typ, "value", q.Value))
			}
			params = e.array(list)
		}
		out = append(out, e.object("headers", headers, "path", path, "queryParams", params))
	}
	return e.array(out)
}

// pathMatch is a step's path match with the Gateway API defaults filled
// in: PathPrefix, "/".
func pathMatch(p *gatewayv1.HTTPPathMatch) (typ, value string) {
	typ, value = string(gatewayv1.PathMatchPathPrefix), "/"
	if p.Type != nil {
		typ = string(*p.Type)
	}
	if p.Value != nil {
		value = *p.Value
	}
	return typ, value
}

// exactOr is a header or query parameter match type, Exact when unset.
func exactOr[T ~string](t *T) string {
	if t == nil {
		return string(gatewayv1.HeaderMatchExact)
	}
	return string(*t)
}

// modifier encodes a header filter as {set={{name,value}},
// add={{name,value}}, remove={names}}; empty lists are nil, as in Kruise.
func (e *encoder) modifier(f *gatewayv1.HTTPHeaderFilter) *lua.LTable {
	pairs := func(hs []gatewayv1.HTTPHeader) *lua.LTable {
		if len(hs) == 0 {
			return nil
		}
		out := make([]*lua.LTable, 0, len(hs))
		for _, h := range hs {
			out = append(out, e.object("name", string(h.Name), "value", h.Value))
		}
		return e.array(out)
	}
	var remove *lua.LTable
	if len(f.Remove) > 0 {
		remove = e.L.CreateTable(len(f.Remove), 0)
		for i, r := range f.Remove {
			remove.RawSetInt(i+1, lua.LString(r))
		}
		remove.Metatable = e.m.array
	}
	return e.object("add", pairs(f.Add), "remove", remove, "set", pairs(f.Set))
}
