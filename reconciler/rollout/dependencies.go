package rollout

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	kerrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/luascripts"
	"github.com/rollgate/rollgate/strategy"
	"github.com/rollgate/rollgate/strategy/verdict"
)

// observeDependencies checks, before anything moves, that every object and
// script a release of this Rollout needs exists: the Services, HTTPRoutes,
// Ingresses and custom routing objects its trafficRoutings name, the Lua
// scripts for them, and the AnalysisTemplates its analysis names. What is
// missing goes into sc.missing, each with the field that names it; the
// planner starts no release until the list is empty and reports it while
// idle.
func (r *Reconciler) observeDependencies(ctx context.Context, sc *scope) error {
	ro := sc.ro
	if ro.Spec.Disabled || !ro.DeletionTimestamp.IsZero() {
		return nil
	}
	base := strategyField(ro)
	var overrides map[string]string
	var missing []string
	need := func(field, what string, obj client.Object, name string) error {
		ok, err := r.exists(ctx, obj, ro.Namespace, name)
		if err != nil {
			return err
		}
		if !ok {
			missing = append(missing, fmt.Sprintf("%s %s/%s named by %s does not exist", what, ro.Namespace, name, field))
		}
		return nil
	}
	needScript := func(field string, resolve func(map[string]string) (luascripts.Script, error)) {
		if overrides == nil {
			overrides = r.trafficOptions(ctx).LuaOverrides
		}
		if _, err := resolve(overrides); err != nil {
			missing = append(missing, fmt.Sprintf("no Lua script for %s: %v", field, err))
		}
	}
	for i, ref := range ro.Spec.Strategy.TrafficRoutings() {
		f := fmt.Sprintf("%s.trafficRoutings[%d]", base, i)
		if err := need(f+".service", "Service", &corev1.Service{}, ref.Service); err != nil {
			return err
		}
		if g := ref.Gateway; g != nil && g.HTTPRouteName != nil {
			if err := need(f+".gateway.httpRouteName", "HTTPRoute", &gatewayv1.HTTPRoute{}, *g.HTTPRouteName); err != nil {
				return err
			}
		}
		if in := ref.Ingress; in != nil {
			if err := need(f+".ingress.name", "Ingress", &networkingv1.Ingress{}, in.Name); err != nil {
				return err
			}
			needScript(f+".ingress.classType", func(o map[string]string) (luascripts.Script, error) {
				return r.Scripts.ResolveIngress(in.ClassType, o)
			})
		}
		for j, c := range ref.CustomNetworkRefs {
			cf := fmt.Sprintf("%s.customNetworkRefs[%d]", f, j)
			gvk, ok := customRefKind(c)
			if !ok {
				continue // the schema refuses it at admission
			}
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			if err := need(cf, c.Kind, u, c.Name); err != nil {
				return err
			}
			needScript(cf, func(o map[string]string) (luascripts.Script, error) {
				return r.Scripts.Resolve(gvk.Kind, gvk.Group, o)
			})
		}
	}
	templates := func(field string, a *v1alpha1.RolloutAnalysis) error {
		m, err := r.missingTemplates(ctx, sc, field, a)
		missing = append(missing, m...)
		return err
	}
	if err := templates(base+".analysis", ro.Spec.Strategy.BackgroundAnalysis()); err != nil {
		return err
	}
	for i, st := range ro.Spec.Strategy.Steps() {
		if err := templates(fmt.Sprintf("%s.steps[%d].analysis", base, i), st.Analysis); err != nil {
			return err
		}
	}
	sc.missing = missing
	return nil
}

// missingTemplates names the AnalysisTemplates of analysis a (at field)
// that do not exist, and records in sc.analysis.invalid the first whose
// arguments a does not resolve.
func (r *Reconciler) missingTemplates(ctx context.Context, sc *scope, field string, a *v1alpha1.RolloutAnalysis) ([]string, error) {
	if a == nil {
		return nil, nil
	}
	ns := sc.ro.Namespace
	var missing []string
	for k, name := range a.Templates {
		t := &v1alpha1.AnalysisTemplate{}
		ok, err := r.exists(ctx, t, ns, name)
		switch {
		case err != nil:
			return missing, err
		case !ok:
			missing = append(missing, fmt.Sprintf("AnalysisTemplate %s/%s named by %s.templates[%d] does not exist", ns, name, field, k))
		case sc.analysis.invalid == nil:
			if _, err := verdict.ResolveArgs(t.Spec.Args, a.Args); err != nil {
				sc.analysis.invalid = &strategy.SpecError{Field: field + ".args",
					Detail: fmt.Sprintf("AnalysisTemplate %s: %v", name, err)}
			}
		}
	}
	return missing, nil
}

// exists reports whether the object named name exists in namespace; a
// kind whose CRD is not installed does not exist either. obj shares the
// cached object's contents (it is not copied: this runs every reconcile),
// so the caller only reads it.
func (r *Reconciler) exists(ctx context.Context, obj client.Object, namespace, name string) (bool, error) {
	err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, obj, client.UnsafeDisableDeepCopy)
	var noKind *apierrors.NoKindMatchError
	switch {
	case err == nil:
		return true, nil
	case kerrors.IsNotFound(err), errors.As(err, &noKind), apierrors.IsNoMatchError(err):
		return false, nil
	}
	return false, err
}
