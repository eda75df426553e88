package chartrun

import (
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// container is what the kubelet would start for one of the chart's
// containers, resolved for one pod.
type container struct {
	// args are the container's args with $(VAR) references expanded.
	args []string
	// env are the container's variables as NAME=value.
	env []string
	// serviceAccount is the pod's ServiceAccount.
	serviceAccount string
}

// containerSpec resolves the container named name of dep for a pod named
// podName in namespace ns: its env (values, and the downward API fields a
// process off-cluster can know) and its args. Anything else the kubelet
// would resolve (Secrets, ConfigMaps, resources, other fields) is an error.
func containerSpec(dep *appsv1.Deployment, name, ns, podName string) (container, error) {
	pod := dep.Spec.Template.Spec
	var ctr *corev1.Container
	var names []string
	for i := range pod.Containers {
		names = append(names, pod.Containers[i].Name)
		if pod.Containers[i].Name == name {
			ctr = &pod.Containers[i]
		}
	}
	if ctr == nil {
		return container{}, fmt.Errorf("no container %q (containers: %s)", name, strings.Join(names, ", "))
	}
	want := roles[name].command
	if got := strings.Join(ctr.Command, " "); got != want {
		if want == "" {
			return container{}, fmt.Errorf("container %q sets command %q; only the image's entrypoint (rollgate-controller) can be run here", ctr.Name, ctr.Command)
		}
		return container{}, fmt.Errorf("container %q runs command %q, want [%s]", ctr.Name, ctr.Command, want)
	}
	if len(ctr.EnvFrom) > 0 {
		return container{}, fmt.Errorf("container %q uses envFrom, which cannot be resolved off-cluster", ctr.Name)
	}
	sa := pod.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	fields := map[string]string{
		"metadata.namespace":      ns,
		"metadata.name":           podName,
		"spec.serviceAccountName": sa,
	}
	vars := map[string]string{}
	var env []string
	var errs []error
	for _, e := range ctr.Env {
		v, err := envValue(e, fields, vars)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		vars[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	if len(errs) > 0 {
		return container{}, fmt.Errorf("container %q: %w", ctr.Name, errors.Join(errs...))
	}
	// rollgate-controller, the image's entrypoint, takes flags only; the
	// image of rollgate 0.1.0 ran /rollgate, and its chart passed the
	// subcommand "controller" first (test/chart's upgrade story runs it).
	if len(ctr.Args) > 0 && ctr.Args[0] != "controller" && !strings.HasPrefix(ctr.Args[0], "-") {
		return container{}, fmt.Errorf("container %q args %q start with an argument that is not a flag: rollgate-controller, the image's entrypoint, takes flags only", ctr.Name, ctr.Args)
	}
	args := make([]string, len(ctr.Args))
	for i, a := range ctr.Args {
		args[i] = expand(a, vars)
	}
	return container{args: args, env: env, serviceAccount: sa}, nil
}

// envValue resolves one variable the way the kubelet does: a value (with
// earlier variables expanded) or a downward API field among fields.
func envValue(e corev1.EnvVar, fields, earlier map[string]string) (string, error) {
	if e.ValueFrom == nil {
		return expand(e.Value, earlier), nil
	}
	if ref := e.ValueFrom.FieldRef; ref != nil {
		if v, ok := fields[ref.FieldPath]; ok {
			return v, nil
		}
		return "", fmt.Errorf("env %s: fieldRef %s cannot be resolved off-cluster", e.Name, ref.FieldPath)
	}
	return "", fmt.Errorf("env %s: valueFrom %s cannot be resolved off-cluster", e.Name, valueFromKind(e.ValueFrom))
}

func valueFromKind(v *corev1.EnvVarSource) string {
	switch {
	case v.SecretKeyRef != nil:
		return "secretKeyRef"
	case v.ConfigMapKeyRef != nil:
		return "configMapKeyRef"
	case v.ResourceFieldRef != nil:
		return "resourceFieldRef"
	}
	return "(unknown source)"
}

// expand replaces $(NAME) with the value of a defined variable, as
// Kubernetes does in args and env values: $$ is a literal $, and a
// reference to an undefined variable is left as written.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
