// Package admission checks rollgate objects offline the way the API server
// checks them when they are created or updated: the CRD's OpenAPI schema
// (with its defaults applied first), x-kubernetes-list-type invariants,
// embedded object metadata and the x-kubernetes-validations CEL rules,
// each evaluated by the API server's own code (k8s.io/apiextensions-apiserver),
// so that a file that passes here is not refused at admission for its
// schema. Unknown fields are errors, as with kubectl's strict field
// validation (its default). Admission webhooks are not run.
package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	chart "github.com/rollgate/rollgate/charts/rollgate"
)

// Validator validates objects of the kinds its CRDs define.
type Validator struct {
	kinds map[schema.GroupVersionKind]*kind
}

// kind is what the API server builds for one version of one CRD.
type kind struct {
	namespaced bool
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

// New returns a Validator for rollgate's own CRDs, as shipped in the Helm
// chart.
func New() (*Validator, error) {
	crds, err := ChartCRDs()
	if err != nil {
		return nil, err
	}
	return NewForCRDs(crds...)
}

// ChartCRDs reads the CRDs shipped in the Helm chart.
func ChartCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := fs.Glob(chart.CRDs, "crds/*.yaml")
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		data, err := fs.ReadFile(chart.CRDs, f)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// NewForCRDs returns a Validator for every served version of crds.
func NewForCRDs(crds ...*apiextensionsv1.CustomResourceDefinition) (*Validator, error) {
	v := &Validator{kinds: map[schema.GroupVersionKind]*kind{}}
	for _, crd := range crds {
		for _, ver := range crd.Spec.Versions {
			if !ver.Served || ver.Schema == nil {
				continue
			}
			k, err := newKind(crd, ver.Schema)
			if err != nil {
				return nil, fmt.Errorf("CRD %s version %s: %w", crd.Name, ver.Name, err)
			}
			v.kinds[schema.GroupVersionKind{Group: crd.Spec.Group, Version: ver.Name, Kind: crd.Spec.Names.Kind}] = k
		}
	}
	return v, nil
}

func newKind(crd *apiextensionsv1.CustomResourceDefinition, val *apiextensionsv1.CustomResourceValidation) (*kind, error) {
	internal := &apiextensionsinternal.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(val, internal, nil); err != nil {
		return nil, err
	}
	s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, fmt.Errorf("the schema is not structural: %w", err)
	}
	s = s.DeepCopy()
	if err := structuraldefaulting.PruneDefaults(s); err != nil {
		return nil, err
	}
	sv, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, err
	}
	return &kind{
		namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		structural: s,
		schema:     sv,
		cel:        cel.NewValidator(s, true, celconfig.PerCallLimit),
	}, nil
}

// Handles reports whether v validates objects of gvk.
func (v *Validator) Handles(gvk schema.GroupVersionKind) bool {
	return v.kinds[gvk] != nil
}

// Validate checks obj as the API server checks a create (old nil) or an
// update from old. It first applies the schema's defaults to obj, in place,
// as the API server does before it validates and stores an object. The
// errors name the field and say what is wrong, as `kubectl apply` would
// print them.
func (v *Validator) Validate(ctx context.Context, obj, old *unstructured.Unstructured) field.ErrorList {
	k := v.kinds[obj.GroupVersionKind()]
	if k == nil {
		return field.ErrorList{field.NotSupported[string](field.NewPath("apiVersion"), obj.GetAPIVersion(), nil)}
	}
	if err := normalize(obj); err != nil {
		return field.ErrorList{field.Invalid(nil, nil, err.Error())}
	}
	errs := unknownFields(obj.Object, k.structural)
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj.Object, k.structural)
	structuraldefaulting.Default(obj.Object, k.structural)
	var oldObj any
	if old != nil {
		o := old.DeepCopy()
		if err := normalize(o); err != nil {
			return field.ErrorList{field.Invalid(nil, nil, "the old object: "+err.Error())}
		}
		structuralpruning.Prune(o.Object, k.structural, true)
		structuraldefaulting.Default(o.Object, k.structural)
		oldObj = o.Object
	}

	errs = append(errs, metavalidation.ValidateObjectMetaAccessor(obj, k.namespaced, metavalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj.UnstructuredContent(), k.schema)...)
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, obj.Object, k.structural, false)...)
	errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, k.structural, obj.Object)...)
	if blocking(errs) {
		return append(errs, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"))
	}
	celErrs, _ := k.cel.Validate(ctx, nil, k.structural, obj.Object, oldObj, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// normalize makes the numbers of u what the API server decodes from
// JSON: int64 for integers, float64 otherwise (YAML decoders give float64
// for every number, which the CEL rules would refuse).
func normalize(u *unstructured.Unstructured) error {
	data, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	m := map[string]any{}
	if err := utiljson.Unmarshal(data, &m); err != nil {
		return err
	}
	u.Object = m
	return nil
}

// blocking reports errors after which the API server does not evaluate
// the CEL rules (the object does not have the shape the rules expect).
func blocking(errs field.ErrorList) bool {
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true
		}
	}
	return false
}

// unknownFields reports the fields the schema does not know, as the API
// server does with strict field validation (kubectl's default): these
// would otherwise be dropped silently.
func unknownFields(obj map[string]any, s *structuralschema.Structural) field.ErrorList {
	copied := unstructured.Unstructured{Object: obj}
	opts := structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}
	paths := structuralpruning.PruneWithOptions(copied.DeepCopy().Object, s, true, opts)
	var errs field.ErrorList
	for _, p := range paths {
		errs = append(errs, field.Invalid(field.NewPath(strings.TrimPrefix(p, ".")), nil, "unknown field: the API server refuses it with strict field validation (kubectl's default); check its spelling and indentation"))
	}
	return errs
}
