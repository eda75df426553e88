package traffic

import (
	"context"
	"fmt"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// DefaultIngressClassType is the annotation dialect used when an ingress
// entry names none.
const DefaultIngressClassType = "nginx"

// IngressRouter shifts traffic through a canary Ingress "<ingress>-canary"
// that the Rollout owns; the user's Ingress is only read, never edited, so
// GitOps tools see no drift on it.
//
// The canary Ingress copies from the user's Ingress its ingressClassName,
// TLS, labels and annotations (without annotations whose name starts with
// "canary", such as nginx.ingress.kubernetes.io/canary-weight, and without
// GitOps tracking metadata), and those rules and paths whose backend is the
// stable Service, with the backend swapped to the canary Service. The
// controller's canary annotations (weight, header, cookie, query matches,
// header changes) come from the Lua dialect script for classType (nginx,
// higress, aliyun-alb, mse, or a user script in the controller's ConfigMap
// under lua.traffic.routing.ingress.<classType>).
//
// Done as soon as the canary Ingress is written: Ingress controllers report
// nothing per canary that rollgate could wait for, which is what the grace
// period is for. Restore deletes the canary Ingress.
type IngressRouter struct {
	c         client.Client
	ro        *v1alpha1.Rollout
	name      string
	classType string
	stable    string
	opts      Options
}

// NewIngressRouter is the Factory of IngressRouter: it returns nil for an
// entry without ingress.
func NewIngressRouter(t Target) (Router, error) {
	if t.Ref.Ingress == nil {
		return nil, nil
	}
	if t.Ref.Ingress.Name == "" {
		return nil, fmt.Errorf("%w: ingress.name is empty", ErrInvalid)
	}
	if t.Ref.Sticky != nil {
		return nil, fmt.Errorf("%w: sticky: the Ingress router cannot keep sessions on one revision: "+
			"remove sticky, or route through gateway or a TraefikService", ErrInvalid)
	}
	class := t.Ref.Ingress.ClassType
	if class == "" {
		class = DefaultIngressClassType
	}
	return &IngressRouter{c: t.Client, ro: t.Rollout, name: t.Ref.Ingress.Name, classType: class,
		stable: t.Ref.Service, opts: t.Options}, nil
}

// CanaryIngressName is the name of the canary Ingress for an Ingress.
func CanaryIngressName(ingress string) string { return ingress + canarySuffix }

func (r *IngressRouter) key(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: r.ro.Namespace, Name: name}
}

// EnsureRoutes implements Router.
func (r *IngressRouter) EnsureRoutes(ctx context.Context, d Desired) (bool, error) {
	if d.CanaryService == "" {
		d.CanaryService = CanaryServiceName(r.stable)
	}
	if d.MirrorPercent > 0 {
		return false, errNoMirror(fmt.Sprintf("the Ingress router (classType %s)", r.classType))
	}
	user := &networkingv1.Ingress{}
	if err := r.c.Get(ctx, r.key(r.name), user); err != nil {
		return false, notFound(err, "Ingress", r.ro.Namespace, r.name)
	}
	want, err := r.build(user, d.CanaryService, d.CanaryRevision)
	if err != nil {
		return false, err
	}
	annotations, err := ingressAnnotations(ctx, r.opts, r.classType, want.Annotations, d)
	if err != nil {
		return false, fmt.Errorf("canary Ingress %s/%s: %w", want.Namespace, want.Name, err)
	}
	want.Annotations = annotations
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		live := &networkingv1.Ingress{}
		err := r.c.Get(ctx, r.key(want.Name), live)
		if apierrors.IsNotFound(err) {
			if err := r.c.Create(ctx, want.DeepCopy(), r.opts.fieldOwner()); err != nil {
				return fmt.Errorf("create Ingress %s/%s: %w", want.Namespace, want.Name, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("get Ingress %s/%s: %w", want.Namespace, want.Name, err)
		}
		if !ownedBy(live, r.ro) {
			return conflict("Ingress", live)
		}
		if mapsEqual(live.Labels, want.Labels) && mapsEqual(live.Annotations, want.Annotations) &&
			equality.Semantic.DeepEqual(live.Spec, want.Spec) {
			return nil
		}
		live.Labels, live.Annotations, live.Spec = want.Labels, want.Annotations, want.Spec
		if err := r.c.Update(ctx, live, r.opts.fieldOwner()); err != nil {
			return fmt.Errorf("update Ingress %s/%s: %w", live.Namespace, live.Name, err)
		}
		return nil
	})
	return err == nil, err
}

// Restore implements Router: it deletes the canary Ingress.
func (r *IngressRouter) Restore(ctx context.Context) (bool, error) {
	return deleteOwned(ctx, r.c, r.ro, &networkingv1.Ingress{}, r.key(CanaryIngressName(r.name)), "Ingress")
}

// build copies the user's Ingress into the canary Ingress, before the
// dialect's annotations are added.
func (r *IngressRouter) build(user *networkingv1.Ingress, canaryService, revision string) (*networkingv1.Ingress, error) {
	name := CanaryIngressName(user.Name)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("%w: canary Ingress name %q: %v", ErrInvalid, name, errs)
	}
	out := &networkingv1.Ingress{}
	out.Name, out.Namespace = name, user.Namespace
	out.Labels = copyMeta(user.Labels, gitopsKey)
	if revision != "" {
		out.Labels = withKey(out.Labels, r.opts.revisionLabel(), revision)
	}
	out.Annotations = copyMeta(user.Annotations, func(k string) bool { return gitopsKey(k) || canaryAnnotation(k) })
	out.OwnerReferences = []metav1.OwnerReference{ownerRef(r.ro)}
	out.Spec.IngressClassName = user.Spec.IngressClassName
	for _, tls := range user.Spec.TLS {
		out.Spec.TLS = append(out.Spec.TLS, *tls.DeepCopy())
	}
	for _, rule := range user.Spec.Rules {
		if rule.HTTP == nil {
			continue
		}
		var paths []networkingv1.HTTPIngressPath
		for _, p := range rule.HTTP.Paths {
			if p.Backend.Service == nil || p.Backend.Service.Name != r.stable {
				continue
			}
			p = *p.DeepCopy()
			p.Backend.Service.Name = canaryService
			paths = append(paths, p)
		}
		if len(paths) > 0 {
			out.Spec.Rules = append(out.Spec.Rules, networkingv1.IngressRule{
				Host:             rule.Host,
				IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: paths}},
			})
		}
	}
	if len(out.Spec.Rules) == 0 {
		return nil, fmt.Errorf("%w: Ingress %s/%s has no path with backend Service %q",
			ErrInvalid, user.Namespace, user.Name, r.stable)
	}
	return out, nil
}

// canaryAnnotation reports an annotation that configures a canary in some
// Ingress controller dialect (its name part starts with "canary").
func canaryAnnotation(key string) bool {
	_, name, ok := strings.Cut(key, "/")
	if !ok {
		name = key
	}
	return strings.HasPrefix(name, "canary")
}
