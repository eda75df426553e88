// Package routehook is the admission webhook that keeps a release's
// traffic step on the Git-owned objects it edits — the stable Service, an
// HTTPRoute, customNetworkRefs objects such as an Istio VirtualService —
// whatever writes them mid-release: Flux's kustomize-controller, Argo CD
// (server-side apply or a client-side Update), Helm, kubectl.
//
// While a release holds an object, the routers in package traffic label
// it rollgate.dev/traffic-held and record the step in its annotation
// rollgate.dev/traffic (next to rollgate.dev/original, the declared
// state). The webhook is called for every UPDATE of an object of any kind
// carrying the label on the old or the new object, so a whole-object write
// that drops the label is still sent. The step is read from the old
// object and put into the update (traffic.AdmitHTTPRoute, AdmitService,
// AdmitCustom) before it is stored: a GitOps re-apply lands with the
// step's weights already in it, and no proxy ever sees the declared 100/0.
// The values the writer declares become the declared state restored when
// the release ends. rollgate's own writes (field manager rollgate) pass as
// sent.
//
// The controller's watch of the same objects stays as a second line: it
// re-asserts the step after the fact if the webhook was bypassed.
package routehook
