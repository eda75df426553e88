package fluxevents

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"

	eventv1beta1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/fluxcd/pkg/runtime/events"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// kustomizeGroup is the API group of Flux's Kustomization.
const kustomizeGroup = "kustomize.toolkit.fluxcd.io"

// The labels Flux's kustomize-controller puts on every object it applies,
// naming the Kustomization that applied it.
const (
	kustomizationNameLabel      = kustomizeGroup + "/name"
	kustomizationNamespaceLabel = kustomizeGroup + "/namespace"
)

// Keys of the metadata of a forwarded event, written under the API group of
// the event's involved object ("kustomize.toolkit.fluxcd.io/rollout"):
// notification-controller keeps only keys prefixed with that group (or with
// event.toolkit.fluxcd.io) and hands them to the providers without the
// prefix ("rollout").
const (
	// metaRollout is the Rollout the event is about: "<namespace>/<name>".
	metaRollout = "rollout"
	// metaCanaryRevision is the revision being released (status.canaryRevision).
	metaCanaryRevision = "canaryRevision"
	// metaStep is the 1-based step in progress (status.currentStepIndex),
	// set while a release runs.
	metaStep = "step"
)

// Options configure New.
type Options struct {
	// Kubernetes records the Kubernetes Event, on the object itself.
	Kubernetes record.EventRecorder
	// Scheme resolves the kind of the objects whose events are forwarded.
	Scheme *runtime.Scheme
	// Address is the event receiver of Flux's notification-controller;
	// "" forwards nothing.
	Address string
	// Controller is the reporting controller of the forwarded events.
	Controller string
	// Log receives the errors of forwarding; the zero Logger discards them.
	Log logr.Logger
}

// Recorder records rollgate's events: the Kubernetes Event stays on the
// object (kubectl describe shows it), and a copy is posted to Flux's
// notification-controller. A Flux Alert selects events by the kind of their
// involved object among Flux's kinds only, so the copy of an event about a
// Rollout that a Flux Kustomization applied is about that Kustomization,
// with the Rollout named in its metadata; the copy of an event about any
// other object is about the object.
type Recorder struct {
	k8s record.EventRecorder
	// flux posts to notification-controller only: its own Kubernetes
	// recorder records nothing. nil when there is no address.
	flux *events.Recorder
	// posts queues the copies for one poster goroutine, in order, so that
	// a slow or unreachable notification-controller (the Flux recorder
	// retries for tens of seconds) never holds up a reconcile. A copy that
	// finds the queue full is dropped and logged.
	posts chan fluxPost
	start sync.Once
	log   logr.Logger
}

// fluxPost is one event copy waiting to be posted.
type fluxPost struct {
	target            runtime.Object
	metadata          map[string]string
	eventtype, reason string
	message           string
}

// fluxQueue is how many event copies may wait for notification-controller.
const fluxQueue = 256

var _ record.EventRecorder = &Recorder{}

// New returns the recorder of o.
func New(o Options) (*Recorder, error) {
	f := &Recorder{k8s: o.Kubernetes, posts: make(chan fluxPost, fluxQueue), log: o.Log}
	if o.Address == "" {
		return f, nil
	}
	if o.Log.GetSink() == nil {
		// The Flux recorder calls its logger's sink: give it one.
		o.Log = funcr.New(func(string, string) {}, funcr.Options{})
	}
	poster, err := events.NewRecorderForScheme(o.Scheme, discardEvents{}, o.Log, o.Address, o.Controller)
	if err != nil {
		return nil, fmt.Errorf("notification-controller address %q: %w", o.Address, err)
	}
	f.flux = poster
	return f, nil
}

// Event records an event about object.
func (f *Recorder) Event(object runtime.Object, eventtype, reason, message string) {
	f.AnnotatedEventf(object, nil, eventtype, reason, "%s", message)
}

// Eventf records an event about object with a formatted message.
func (f *Recorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	f.AnnotatedEventf(object, nil, eventtype, reason, messageFmt, args...)
}

// AnnotatedEventf records the Kubernetes Event about object, then queues
// its copy for notification-controller; it never waits for the post.
func (f *Recorder) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	if f.k8s != nil {
		f.k8s.AnnotatedEventf(object, annotations, eventtype, reason, messageFmt, args...)
	}
	if f.flux == nil {
		return
	}
	target, metadata := forwarded(object, annotations)
	p := fluxPost{target: target, metadata: metadata, eventtype: eventtype, reason: reason, message: fmt.Sprintf(messageFmt, args...)}
	f.start.Do(func() { go f.post() })
	select {
	case f.posts <- p:
	default:
		f.log.Info("notification-controller is behind: event not forwarded", "reason", reason)
	}
}

// post sends the queued copies, one at a time, for the life of the process.
func (f *Recorder) post() {
	for p := range f.posts {
		f.flux.AnnotatedEventf(p.target, p.metadata, p.eventtype, p.reason, "%s", p.message)
	}
}

// forwarded returns the object the copy of an event about object is about,
// and its metadata. A Rollout applied by a Kustomization (labelled by it)
// is forwarded as that Kustomization; any other object as itself. The
// metadata is annotations with their rollgate.dev/ keys moved to the
// target's group, plus, for a Rollout, the Rollout, its canary revision and
// step.
func forwarded(object runtime.Object, annotations map[string]string) (runtime.Object, map[string]string) {
	ro, ok := object.(*v1alpha1.Rollout)
	if !ok {
		return object, annotations
	}
	var target runtime.Object
	group := v1alpha1.GroupVersion.Group
	name, ns := ro.Labels[kustomizationNameLabel], ro.Labels[kustomizationNamespaceLabel]
	switch {
	case name == "" || ns == "":
		// A copy: the event is posted later, while the reconciler goes on
		// changing its Rollout.
		target = ro.DeepCopy()
	default:
		ks := &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: kustomizeGroup + "/v1", Kind: "Kustomization"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: fluxEventAnnotations(ro)},
		}
		target, group = ks, kustomizeGroup
	}
	metadata := make(map[string]string, len(annotations)+4)
	for k, v := range annotations {
		if rest, ok := strings.CutPrefix(k, v1alpha1.GroupVersion.Group+"/"); ok {
			k = group + "/" + rest
		}
		metadata[k] = v
	}
	id := ro.Namespace + "/" + ro.Name
	metadata[group+"/"+metaRollout] = id
	if rev := ro.Status.CanaryRevision; rev != "" {
		metadata[group+"/"+metaCanaryRevision] = rev
	}
	if step := ro.Status.CurrentStepIndex; step > 0 {
		metadata[group+"/"+metaStep] = strconv.Itoa(int(step))
	}
	// notification-controller drops an event identical to one of the last
	// minutes (same involved object and message) unless its token differs:
	// the token keeps the Rollouts of one Kustomization apart. It is not
	// passed on to the providers.
	metadata[group+"/"+eventv1beta1.MetaTokenKey] = id
	return target, metadata
}

// fluxEventAnnotations returns the Rollout's event.toolkit.fluxcd.io/
// annotations, which Flux adds to the metadata of the events about an
// object: the user's extra metadata follows the Rollout's events to the
// Kustomization.
func fluxEventAnnotations(ro *v1alpha1.Rollout) map[string]string {
	out := maps.Clone(ro.Annotations)
	maps.DeleteFunc(out, func(k, _ string) bool { return !strings.HasPrefix(k, eventv1beta1.Group+"/") })
	return out
}

// discardEvents is a Kubernetes event recorder that records nothing.
type discardEvents struct{}

func (discardEvents) Event(runtime.Object, string, string, string)          {}
func (discardEvents) Eventf(runtime.Object, string, string, string, ...any) {}
func (discardEvents) AnnotatedEventf(runtime.Object, map[string]string, string, string, string, ...any) {
}
