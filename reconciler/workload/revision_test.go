package workload

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func template(image string) *corev1.PodTemplateSpec {
	return &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: image}}},
	}
}

func TestRevision(t *testing.T) {
	base := Revision(template("web:v1"))
	if len(base) != 10 {
		t.Fatalf("Revision = %q, want 10 characters", base)
	}
	if again := Revision(template("web:v1")); again != base {
		t.Fatalf("Revision is not deterministic: %q then %q", base, again)
	}
	withHash := template("web:v1")
	withHash.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = "abc"
	withHash.Labels[appsv1.ControllerRevisionHashLabelKey] = "web-123"
	withHash.Labels["rollgate.dev/batch-id"] = "2"
	withHash.Annotations = map[string]string{"rollgate.dev/whatever": "x"}
	if got := Revision(withHash); got != base {
		t.Errorf("Revision with controller hash and rollgate labels = %q, want %q (they must not count)", got, base)
	}
	if got := Revision(template("web:v2")); got == base {
		t.Errorf("Revision of another image = %q, the same as v1", got)
	}
	other := template("web:v1")
	other.Labels["tier"] = "front"
	if got := Revision(other); got == base {
		t.Errorf("Revision with another label = %q, the same as without", got)
	}
}
