package workload

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

// labelPrefix is the prefix of every label and annotation rollgate sets;
// none of them is part of a revision.
const labelPrefix = "rollgate.dev/"

// Revision returns rollgate's revision of a pod template: a 10 character
// hash of the template without the labels the native controllers add
// (pod-template-hash, controller-revision-hash) and without rollgate's own
// labels and annotations. It is deterministic across restarts and does not
// depend on the API server's hashing, so the same template has the same
// revision in every ReplicaSet, ControllerRevision and workload.
func Revision(tpl *corev1.PodTemplateSpec) string {
	t := tpl.DeepCopy()
	t.Labels = withoutRevisionKeys(t.Labels)
	t.Annotations = withoutRevisionKeys(t.Annotations)
	data, err := json.Marshal(t)
	if err != nil {
		// A PodTemplateSpec always marshals; keep the function total anyway.
		data = []byte(t.String())
	}
	h := fnv.New64a()
	_, _ = h.Write(data)
	return rand.SafeEncodeString(fmt.Sprintf("%010d", h.Sum64()%10_000_000_000))
}

// Images returns the containers of a pod template as "<container>=<image>",
// sorted by container (init containers first, prefixed "init:"): what
// makes one version the same version in clusters whose templates differ
// otherwise (spec.fleet compares them).
func Images(tpl *corev1.PodTemplateSpec) []string {
	out := make([]string, 0, len(tpl.Spec.InitContainers)+len(tpl.Spec.Containers))
	for _, c := range tpl.Spec.InitContainers {
		out = append(out, "init:"+c.Name+"="+c.Image)
	}
	for _, c := range tpl.Spec.Containers {
		out = append(out, c.Name+"="+c.Image)
	}
	slices.Sort(out)
	return out
}

func withoutRevisionKeys(m map[string]string) map[string]string {
	var out map[string]string
	for k, v := range m {
		if k == appsv1.DefaultDeploymentUniqueLabelKey || k == appsv1.ControllerRevisionHashLabelKey ||
			strings.HasPrefix(k, labelPrefix) {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(m))
		}
		out[k] = v
	}
	return out
}
