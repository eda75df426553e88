package gitsource

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/reconciler/internal/rollouttest"
	"github.com/rollgate/rollgate/test/envtest"
	"github.com/rollgate/rollgate/test/gitserver"
)

// TestTheWriterCollectsTheFilesOfDeletedRollouts: status files left on
// the branch by Rollouts deleted while Git was down (their removal lived
// only in memory) are removed when the writer starts, judged by a live
// read of the Rollout: NotFound only. The file of a Rollout that exists,
// of one in a namespace the controller cannot read, a file that is not a
// status file and the files of another cluster's directory stay.
func TestTheWriterCollectsTheFilesOfDeletedRollouts(t *testing.T) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	var env *crenvtest.Environment
	_, admin := envtest.Start(t, envtest.WithScheme(scheme), envtest.WithEnvironment(func(e *crenvtest.Environment) { env = e }))
	ctx := t.Context()
	const ns, hidden = "apps", "hidden"
	for _, n := range []string{ns, hidden} {
		rollouttest.MustCreate(t, admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	// The controller may read Rollouts and Repositories in ns only.
	rollouttest.MustCreate(t, admin, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "collector"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"rollouts", "repositories"}, Verbs: []string{"get"}}}})
	rollouttest.MustCreate(t, admin, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "collector"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "collector"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "collector"}}})
	user, err := env.AddUser(crenvtest.User{Name: "collector"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := client.New(user.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"README.md": "app\n"})
	if err != nil {
		t.Fatal(err)
	}
	rollouttest.MustCreate(t, admin, rollouttest.GatedRollout(t, ns, "alive", &v1alpha1.GitReference{Repository: "app-repo", Path: "alive.yaml"}))
	statusFile := func(namespace, name string) string {
		data, err := gitsync.RenderStatus(gitsync.RolloutState{Namespace: namespace, Name: name, Phase: "Healthy"})
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	const cluster = "east"
	files := map[string]string{
		cluster + "/apps/alive.yaml":  statusFile(ns, "alive"),
		cluster + "/apps/gone.yaml":   statusFile(ns, "gone"),
		cluster + "/hidden/gone.yaml": statusFile(hidden, "gone"),
		cluster + "/apps/notes.yaml":  "# mine\nkind: Notes\n",
		"west/apps/gone.yaml":         statusFile(ns, "gone"),
	}
	if _, err := srv.Commit("app", gitsync.DefaultStatusBranch, "status left by a controller that restarted while Git was down", files); err != nil {
		t.Fatal(err)
	}

	repo := &v1alpha1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-repo"},
		Spec: v1alpha1.RepositorySpec{URL: url, Branch: "main",
			Status: v1alpha1.StatusWriteSpec{Cluster: cluster, Window: &metav1.Duration{Duration: time.Hour}}}}
	rollouttest.MustCreate(t, admin, repo)
	g := NewPool(reader, Options{InsecureHTTP: true})
	go func() { _ = g.Start(ctx) }()
	if _, err := g.forRepository(ctx, repo); err != nil {
		t.Fatal(err)
	}
	gone := func(p string) bool {
		_, err := srv.ReadFile("app", gitsync.DefaultStatusBranch, p)
		return err != nil
	}
	rollouttest.WaitFor(ctx, t, "the status file of the deleted Rollout removed", func() bool { return gone(cluster + "/apps/gone.yaml") })
	for p := range files {
		if p != cluster+"/apps/gone.yaml" && gone(p) {
			t.Errorf("%s was removed; only %s/apps/gone.yaml should be", p, cluster)
		}
	}
}
