package notify

import (
	"encoding/json"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/argoproj/notifications-engine/pkg/templates"
	"github.com/hashicorp/go-retryablehttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// sample is a Rollout as each trigger sees it.
func sample(t Trigger) *v1alpha1.Rollout {
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	s := &ro.Status
	s.Phase, s.CanaryRevision, s.StableRevision, s.StepCount = v1alpha1.PhaseProgressing, "7d9f8c6b5", "5c4b3a291", 4
	s.CurrentStepIndex, s.Traffic = 2, "80/20"
	switch t {
	case OnGateWaiting:
		s.AwaitingApproval = &v1alpha1.ApprovalRequest{Revision: "7d9f8c6b5", Step: 2, Branch: "rollgate/approve/shop/web/7d9f8c6b5/2",
			PullRequestURL: "https://git.example.com/shop/deploy/pulls/42"}
	case OnAnalysisFailed, OnRolledBack, OnRevertedInGit:
		s.Phase, s.CurrentStepState = v1alpha1.PhaseFailed, v1alpha1.StepRolledBack
		s.Message = `metric "error-rate" failed: 0.07 > 0.01 "in 3 of 3 measurements"`
		s.Conditions = []metav1.Condition{{Type: v1alpha1.ReadyCondition, Status: "False", Reason: v1alpha1.ReasonAnalysisFailed}}
		s.Git = &v1alpha1.GitStatus{RevertBranch: "rollgate/revert/shop/web/7d9f8c6b5", RevertPullRequestURL: "https://git.example.com/shop/deploy/pulls/43"}
	case OnReleased:
		s.Phase, s.StableRevision, s.CurrentStepIndex, s.Traffic = v1alpha1.PhaseHealthy, "7d9f8c6b5", 0, ""
	}
	return ro
}

// TestCatalogRendersEveryService renders every default template for the
// services whose APIs cannot be reached from here (Slack, Teams) and the
// ones the e2e story sends through for real (the message, email): the
// Slack attachments and Teams actions must be valid JSON, and the whole
// rendering is kept in testdata (UPDATE_GOLDEN=1 rewrites it).
func TestCatalogRendersEveryService(t *testing.T) {
	_, cfg, err := Configure(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "rollgate-notifications"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := templates.NewService(cfg.Templates)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, tr := range Triggers {
		conds := cfg.Triggers[string(tr)]
		if len(conds) != 1 || len(conds[0].Send) != 1 {
			t.Fatalf("trigger %s: want one condition sending one template, got %+v", tr, conds)
		}
		vars, err := Vars(sample(tr), tr)
		if err != nil {
			t.Fatal(err)
		}
		n, err := svc.FormatNotification(vars, conds[0].Send...)
		if err != nil {
			t.Fatalf("trigger %s: %v", tr, err)
		}
		if n.Slack == nil || n.Teams == nil || n.Email == nil || n.Message == "" {
			t.Fatalf("trigger %s: a service without a template: %+v", tr, n)
		}
		for what, js := range map[string]string{"slack attachments": n.Slack.Attachments, "teams potentialAction": n.Teams.PotentialAction} {
			if js == "" {
				continue
			}
			var v any
			if err := json.Unmarshal([]byte(js), &v); err != nil {
				t.Errorf("trigger %s: %s is not JSON: %v\n%s", tr, what, err, js)
			}
		}
		y, err := yaml.Marshal(n)
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString("# " + string(tr) + "\n" + string(y) + "---\n")
	}
	golden := filepath.Join("testdata", "catalog.golden.yaml")
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with UPDATE_GOLDEN=1 to write it)", err)
	}
	if string(want) != out.String() {
		t.Errorf("rendered templates differ from %s (UPDATE_GOLDEN=1 after an intended change):\n%s", golden, out.String())
	}
}

// TestConfigureNamesTheBadKey: a template that does not parse names its
// key; a user's key replaces the catalog's.
func TestConfigureNamesTheBadKey(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "rollgate-system", Name: "rollgate-notifications"},
		Data: map[string]string{"template.released": "message: [unclosed"}}
	if _, _, err := Configure(cm, nil); err == nil || !strings.Contains(err.Error(), "released") || !strings.Contains(err.Error(), "rollgate-system/rollgate-notifications") {
		t.Errorf("Configure = %v, want an error naming the template released and the ConfigMap", err)
	}
	cm.Data["template.released"] = "message: shipped {{.release.stableRevision}}"
	_, cfg, err := Configure(cm, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Templates["released"].Message; got != "shipped {{.release.stableRevision}}" {
		t.Errorf("the user's template released is %q", got)
	}
}

func TestRedact(t *testing.T) {
	s := &corev1.Secret{Data: map[string][]byte{"token": []byte("s3cr3t-token"), "short": []byte("ab"), "inner": []byte("s3cr3t")}}
	got := redact(`Post "https://hooks.example/s3cr3t-token": dial tcp: refused; header s3cr3t; ab`, secretValues(s))
	if want := `Post "https://hooks.example/*****": dial tcp: refused; header *****; ab`; got != want {
		t.Errorf("redact = %q, want %q", got, want)
	}
}

// TestRetryLogSilenced: once a Notifier exists, the webhook library's
// request log (method and URL of every request, a credential where the URL
// holds one) goes nowhere.
func TestRetryLogSilenced(t *testing.T) {
	New(Options{})
	l, ok := retryablehttp.NewClient().Logger.(*log.Logger)
	if !ok {
		t.Fatalf("go-retryablehttp's default logger is a %T now, not a *log.Logger: find another way to keep URLs out of the log", retryablehttp.NewClient().Logger)
	}
	if l.Writer() != io.Discard {
		t.Errorf("go-retryablehttp still logs to %v", l.Writer())
	}
}

// TestExampleConfigures: the notifications ConfigMap and Secret of
// examples/ build an engine with the services they name.
func TestExampleConfigures(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "rollout-checks-hooks-notifications.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm *corev1.ConfigMap
	var secret *corev1.Secret
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var head struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "ConfigMap":
			cm = &corev1.ConfigMap{}
			err = yaml.Unmarshal([]byte(doc), cm)
		case "Secret":
			secret = &corev1.Secret{}
			err = yaml.Unmarshal([]byte(doc), secret)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if cm == nil || secret == nil {
		t.Fatal("the example has no notifications ConfigMap and Secret")
	}
	a, cfg, err := Configure(cm, secret)
	if err != nil {
		t.Fatal(err)
	}
	if svcs := a.GetNotificationServices(); svcs["slack"] == nil || svcs["email"] == nil {
		t.Errorf("services %v, want slack and email", svcs)
	}
	if d := cfg.GetGlobalDestinations(map[string]string{"team": "shop"}); len(d[string(OnGateWaiting)]) != 1 {
		t.Errorf("a Rollout labelled team=shop is subscribed to %v", d)
	}
}
