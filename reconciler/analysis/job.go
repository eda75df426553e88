package analysis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy/verdict"
)

// ErrPending is what a provider answers while a measurement is under way
// (a Job check's Job runs): no measurement is recorded, and the metric is
// measured again PendingPoll later.
var ErrPending = errors.New("measurement under way")

// Labels of the Jobs of Job checks and Job hooks.
const (
	// LabelCheckRollout names the Rollout a Job measures or answers for.
	LabelCheckRollout = "rollgate.dev/check-rollout"
	// LabelCheck names the template and metric ("<template>.<metric>"),
	// or the hook ("hook.<point>.<name>", point in lower case).
	LabelCheck = "rollgate.dev/check"
)

// JobHistory is how many finished Jobs of a Rollout's checks and hooks are
// kept; older ones are deleted (with their pods) when a Job ends.
const JobHistory = 5

// logTailLines and logTailBytes bound the log a measurement's message
// keeps of a Job's pod.
const (
	logTailLines = 10
	logTailBytes = 2048
)

// Check says which measurement a Job takes, or which ask of a Job hook it
// answers: it names the Job, so that the reconcile that finds it running
// and the one that reads its outcome agree, also after a controller
// restart.
type Check struct {
	// Namespace and Rollout the check measures for.
	Namespace, Rollout string
	// Revision is the canary revision; Template and Metric the metric;
	// Step its step (0: background); Index how many measurements the
	// metric has taken so far.
	Revision, Template, Metric string
	Step, Index                int32
	// Hook, for a Job hook, is its point: Metric is then the hook's name,
	// Step the step it is declared on (0: onRollback), Index how many
	// Jobs it ran before. Attempt is the release's attempt: a retried
	// release measures and asks its hooks again, with Jobs of its own.
	Hook    v1alpha1.HookPoint
	Attempt int32
}

// JobName is the Job of check c: the Rollout's name (cut) and a hash of
// the rest, within the 63 characters a Job's name may have.
func (c Check) JobName() string {
	id, kind := fmt.Sprintf("%s/%s/%s/%s/%s/%d/%d", c.Namespace, c.Rollout, c.Revision, c.Template, c.Metric, c.Step, c.Index), "-check-"
	if c.Attempt > 1 {
		// A retried release measures afresh (the first attempt's names
		// are kept as they were).
		id += fmt.Sprintf("/attempt-%d", c.Attempt)
	}
	if c.Hook != "" {
		id, kind = fmt.Sprintf("hook/%s/%s/%s/%s/%s/%d/%d/%d", c.Namespace, c.Rollout, c.Revision, c.Hook, c.Metric, c.Step, c.Attempt, c.Index), "-hook-"
	}
	h := sha256.Sum256([]byte(id))
	prefix := c.Rollout
	if len(prefix) > 40 {
		prefix = strings.TrimRight(prefix[:40], "-.")
	}
	return prefix + kind + hex.EncodeToString(h[:6])
}

// label is the LabelCheck value of c's Jobs: "<template>.<metric>", or
// "hook.<point>.<name>" for a Job hook.
func (c Check) label() string {
	if c.Hook != "" {
		return labelValue("hook." + strings.ToLower(string(c.Hook)) + "." + c.Metric)
	}
	return labelValue(c.Template + "." + c.Metric)
}

// describe says what c's Job is for, in its annotation.
func (c Check) describe() string {
	if c.Hook != "" {
		return fmt.Sprintf("%s hook %s of step %d, Job %d of revision %s (attempt %d)", strings.ToLower(string(c.Hook)), c.Metric, c.Step, c.Index+1, c.Revision, c.Attempt)
	}
	return fmt.Sprintf("template %s, metric %s, step %d, measurement %d of revision %s", c.Template, c.Metric, c.Step, c.Index+1, c.Revision)
}

// JobProvider runs the Jobs of Job checks and Job hooks: the first look at
// a check creates its Job and answers ErrPending until the Job ends; a Job
// that succeeded is a yes ([1] for a check), one that failed (or whose pod
// cannot start: an image that cannot be pulled, a missing ConfigMap) a no
// ([0]). The note holds the reason and the last lines of the pod's log.
type JobProvider struct {
	// Reader reads Jobs and lists pods, uncached. The provider writes
	// nothing: the Jobs to create and delete go to Query.Writes, for the
	// reconciler's act phase (ApplyWrites).
	Reader client.Reader
	// Logs returns the last lines of a container's log; nil leaves logs
	// out.
	Logs func(ctx context.Context, namespace, pod, container string, lines, bytes int64) (string, error)
}

// PodLogs is JobProvider.Logs through a clientset.
func PodLogs(cs kubernetes.Interface) func(ctx context.Context, namespace, pod, container string, lines, bytes int64) (string, error) {
	return func(ctx context.Context, namespace, pod, container string, lines, bytes int64) (string, error) {
		b, err := cs.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, TailLines: &lines, LimitBytes: &bytes}).DoRaw(ctx)
		return string(b), err
	}
}

// Measure implements Provider: [1] when the Job succeeded, [0] when it
// failed.
func (p *JobProvider) Measure(ctx context.Context, q Query) (Value, error) {
	ok, note, err := p.Run(ctx, q)
	if q.Note != nil {
		*q.Note = note
	}
	if err != nil {
		return Value{}, err
	}
	if ok {
		return verdict.List([]float64{1}), nil
	}
	return verdict.List([]float64{0}), nil
}

// Run looks at the Job of q.Check (q.Job its spec): ErrPending while it
// runs, its creation asked in q.Writes when it does not exist yet;
// otherwise whether it succeeded, with the outcome in words (the reason,
// the last lines of its pod's log) in note. A Job whose pod cannot start
// is a no at once, and is deleted (q.Writes). Finished Jobs of the Rollout
// beyond JobHistory are deleted when one ends.
func (p *JobProvider) Run(ctx context.Context, q Query) (ok bool, note string, err error) {
	if q.Job == nil || q.Check == nil {
		return false, "", errors.New("no Job spec")
	}
	c := q.Check
	key := types.NamespacedName{Namespace: c.Namespace, Name: c.JobName()}
	var job batchv1.Job
	err = p.Reader.Get(ctx, key, &job)
	if apierrors.IsNotFound(err) {
		return false, "", p.create(q, key)
	}
	if err != nil {
		return false, "", fmt.Errorf("reading Job %s: %w", key, err)
	}
	for _, cond := range job.Status.Conditions {
		if cond.Status != corev1.ConditionTrue {
			continue
		}
		switch cond.Type {
		case batchv1.JobComplete:
			p.prune(ctx, q)
			return true, fmt.Sprintf("Job %s succeeded%s", key.Name, p.tail(ctx, &job)), nil
		case batchv1.JobFailed:
			p.prune(ctx, q)
			return false, fmt.Sprintf("Job %s failed: %s: %s%s", key.Name, cond.Reason, cond.Message, p.tail(ctx, &job)), nil
		}
	}
	if why := p.cannotStart(ctx, &job); why != "" {
		q.Writes.delete(&job)
		return false, fmt.Sprintf("Job %s cannot start: %s", key.Name, why), nil
	}
	return false, "", ErrPending
}

// create asks for the Job of q, owned by the Rollout.
func (p *JobProvider) create(q Query, key types.NamespacedName) error {
	c := q.Check
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: key.Namespace, Name: key.Name,
			Labels:      map[string]string{LabelCheckRollout: labelValue(c.Rollout), LabelCheck: c.label()},
			Annotations: map[string]string{"rollgate.dev/check": c.describe()},
		},
		Spec: *q.Job.DeepCopy(),
	}
	if q.Owner != nil {
		job.OwnerReferences = []metav1.OwnerReference{*q.Owner}
	}
	q.Writes.create(job)
	return ErrPending
}

// fatalWaiting are the reasons a pod's container waits that do not pass
// by themselves.
var fatalWaiting = map[string]bool{
	"ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true,
}

// cannotStart says why the Job's pod cannot start, or "".
func (p *JobProvider) cannotStart(ctx context.Context, job *batchv1.Job) string {
	var pods corev1.PodList
	if err := p.Reader.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return ""
	}
	for _, pod := range pods.Items {
		for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
			if w := cs.State.Waiting; w != nil && fatalWaiting[w.Reason] {
				return fmt.Sprintf("pod %s, container %s: %s: %s", pod.Name, cs.Name, w.Reason, w.Message)
			}
		}
	}
	return ""
}

// tail is ", last lines of its log:\n..." for the Job's newest pod, or "".
func (p *JobProvider) tail(ctx context.Context, job *batchv1.Job) string {
	if p.Logs == nil {
		return ""
	}
	var pods corev1.PodList
	if err := p.Reader.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil || len(pods.Items) == 0 {
		return ""
	}
	sort.Slice(pods.Items, func(i, j int) bool {
		return pods.Items[j].CreationTimestamp.Before(&pods.Items[i].CreationTimestamp)
	})
	pod := pods.Items[0]
	if len(pod.Spec.Containers) == 0 {
		return ""
	}
	log, err := p.Logs(ctx, pod.Namespace, pod.Name, pod.Spec.Containers[0].Name, logTailLines, logTailBytes)
	if err != nil {
		return fmt.Sprintf(" (its log cannot be read: %v)", err)
	}
	if log = strings.TrimSpace(log); log == "" {
		return ""
	}
	// The measurement's message is bounded: keep the log's last lines
	// that fit beside the Job's outcome.
	for len(log) > logInMessage {
		_, rest, ok := strings.Cut(log, "\n")
		if !ok {
			cut := len(log) - logInMessage
			for cut < len(log) && !utf8.RuneStart(log[cut]) {
				cut++
			}
			log = "..." + log[cut:]
			break
		}
		log = rest
	}
	return "; last lines of its log:\n" + log
}

// logInMessage is how much of a Job's log a measurement's message keeps.
const logInMessage = 240

// prune asks to delete the finished Jobs of the Rollout's checks beyond
// the newest JobHistory. A failure is left for the next measurement.
func (p *JobProvider) prune(ctx context.Context, q Query) {
	var jobs batchv1.JobList
	if err := p.Reader.List(ctx, &jobs, client.InNamespace(q.Check.Namespace), client.MatchingLabels{LabelCheckRollout: labelValue(q.Check.Rollout)}); err != nil {
		return
	}
	var done []batchv1.Job
	for _, j := range jobs.Items {
		if finished(&j) && j.DeletionTimestamp == nil {
			done = append(done, j)
		}
	}
	sort.Slice(done, func(i, j int) bool { return done[j].CreationTimestamp.Before(&done[i].CreationTimestamp) })
	for i := JobHistory; i < len(done); i++ {
		q.Writes.delete(&done[i])
	}
}

// Writes are the Jobs the measurements of one Run need created or
// deleted; ApplyWrites makes them.
type Writes struct {
	mu     sync.Mutex
	Create []*batchv1.Job
	Delete []*batchv1.Job
}

func (w *Writes) create(j *batchv1.Job) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.Create = append(w.Create, j)
}

func (w *Writes) delete(j *batchv1.Job) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.Delete = append(w.Delete, j.DeepCopy())
}

// Empty reports whether there is nothing to write.
func (w *Writes) Empty() bool { return w == nil || len(w.Create)+len(w.Delete) == 0 }

// ApplyWrites creates and deletes the Jobs of w (deleted with their pods);
// a Job already there, or already gone, is no error.
func ApplyWrites(ctx context.Context, c client.Writer, w *Writes) error {
	if w.Empty() {
		return nil
	}
	var errs []error
	for _, j := range w.Create {
		if err := c.Create(ctx, j); err != nil && !apierrors.IsAlreadyExists(err) {
			errs = append(errs, fmt.Errorf("creating Job %s/%s: %w", j.Namespace, j.Name, err))
		}
	}
	background := metav1.DeletePropagationBackground
	for _, j := range w.Delete {
		if err := c.Delete(ctx, j, &client.DeleteOptions{PropagationPolicy: &background}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting Job %s/%s: %w", j.Namespace, j.Name, err))
		}
	}
	return errors.Join(errs...)
}

func finished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// labelValue is s cut to a label value's 63 characters.
func labelValue(s string) string {
	if len(s) > 63 {
		s = strings.TrimRight(s[:63], "-._")
	}
	return s
}
