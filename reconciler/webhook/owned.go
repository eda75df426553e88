package webhook

import (
	"bytes"
	"encoding/json"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Owned names the fields of an object a mutating hook may change: spec
// paths, and single keys of the labels and annotations. Nothing else of
// the request's object is touched, so fields this build does not know (a
// newer API server's) and the number formats the writer sent survive.
type Owned struct {
	Paths       [][]string
	Labels      []string
	Annotations []string
}

// Apply returns raw (the request's object) with the owned fields copied in
// from obj, which a hook decoded from raw and changed: set where obj has
// them, removed where it does not.
func (o Owned) Apply(raw []byte, obj client.Object) ([]byte, error) {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep every number exactly as sent
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	typed, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	for _, path := range o.Paths {
		copyPath(doc, typed, path)
	}
	meta, _ := doc["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		doc["metadata"] = meta
	}
	for _, k := range o.Labels {
		copyKey(meta, "labels", k, obj.GetLabels())
	}
	for _, k := range o.Annotations {
		copyKey(meta, "annotations", k, obj.GetAnnotations())
	}
	return json.Marshal(doc)
}

// Patch is Apply as an admission response: the JSON patch from raw to raw
// with the owned fields of obj (no patch when nothing changed).
func (o Owned) Patch(raw []byte, obj client.Object) (admission.Response, error) {
	out, err := o.Apply(raw, obj)
	if err != nil {
		return admission.Response{}, err
	}
	return admission.PatchResponseFromRaw(raw, out), nil
}

// FieldManager returns the field manager of a request's options.
func FieldManager(req admission.Request) string {
	var opts struct {
		FieldManager string `json:"fieldManager"`
	}
	if len(req.Options.Raw) == 0 || json.Unmarshal(req.Options.Raw, &opts) != nil {
		return ""
	}
	return opts.FieldManager
}

// copyKey sets key of meta[field] (labels or annotations) to its value in
// from, or removes it there.
func copyKey(meta map[string]any, field, key string, from map[string]string) {
	m, _ := meta[field].(map[string]any)
	v, ok := from[key]
	switch {
	case ok && m == nil:
		meta[field] = map[string]any{key: v}
	case ok:
		m[key] = v
	default:
		delete(m, key)
	}
}

// copyPath sets path in dst to its value in src, or removes it there.
func copyPath(dst, src map[string]any, path []string) {
	for _, k := range path[:len(path)-1] {
		d, _ := dst[k].(map[string]any)
		s, _ := src[k].(map[string]any)
		if d == nil {
			if s == nil {
				return
			}
			d = map[string]any{}
			dst[k] = d
		}
		dst, src = d, s
	}
	last := path[len(path)-1]
	if v, ok := src[last]; ok {
		dst[last] = v
	} else {
		delete(dst, last)
	}
}
