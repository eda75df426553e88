package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Repository is a Git repository that Rollouts in its namespace write their
// progress to and read their approvals from.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rgrepo,categories=rollgate
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.spec.url`
// +kubebuilder:printcolumn:name="Branch",type=string,JSONPath=`.spec.branch`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Commit",type=string,JSONPath=`.status.lastFetchedCommit`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
type Repository struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RepositorySpec   `json:"spec"`
	Status RepositoryStatus `json:"status,omitempty"`
}

// RepositoryList is a list of Repositories.
//
// +kubebuilder:object:root=true
type RepositoryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Repository `json:"items"`
}

// RepositorySpec says how to reach a Git repository and how to write to it.
//
// +kubebuilder:validation:XValidation:rule="!has(self.approvals) || !has(self.approvals.reviews) || has(self.forge)",message="spec.approvals.reviews needs spec.forge: the reviews are read from the forge's API; set spec.forge (provider, url, project, secretRef) or remove spec.approvals.reviews",fieldPath=".approvals.reviews"
type RepositorySpec struct {
	// URL of the repository: https://, http:// or ssh:// (or scp-like
	// git@host:path).
	// +kubebuilder:validation:Pattern=`^(https?://|ssh://|[a-zA-Z0-9._-]+@[a-zA-Z0-9._-]+:)`
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`

	// Branch that the GitOps tool tracks and approvals are merged into.
	// +kubebuilder:default=main
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Branch string `json:"branch,omitempty"`

	// SecretRef names a Secret with credentials: `username` and `password`
	// (or `token`) for HTTPS; `identity` (private key) and `known_hosts` for
	// SSH.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// Interval between fetches of the tracked branch while a gate waits,
	// to notice merged approvals. Otherwise the branch is fetched for the
	// status every minute, or every interval when longer. A push webhook
	// can trigger a fetch at once.
	// +kubebuilder:default="5s"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Status says where progress is written.
	// +optional
	Status StatusWriteSpec `json:"status,omitempty"`

	// Commit sets the author, message and signing of rollgate's commits.
	// +optional
	Commit CommitSpec `json:"commit,omitempty"`

	// Forge opens and closes pull requests through a forge's API. Without
	// it, approval and revert branches are pushed and merged by hand.
	// +optional
	Forge *ForgeSpec `json:"forge,omitempty"`

	// RevertPolicy after a failed release: Branch pushes a revert branch
	// (and opens a pull request with a forge); Commit commits the revert
	// to the tracked branch directly.
	// +kubebuilder:validation:Enum=Branch;Commit
	// +kubebuilder:default=Branch
	// +optional
	RevertPolicy string `json:"revertPolicy,omitempty"`

	// Approvals says which approvals found in Git count. Unset, every
	// approval on the tracked branch counts, and so do approvals written
	// into a Rollout object in the cluster. spec.approvals.reviews needs
	// spec.forge.
	// +optional
	Approvals *ApprovalPolicy `json:"approvals,omitempty"`

	// Webhook says how the push webhook (POST /hook/<namespace>/<name>)
	// authenticates the forge's calls for this Repository.
	// +optional
	Webhook *WebhookSpec `json:"webhook,omitempty"`

	// Fleet says whose progress the spec.fleet gates of this Repository's
	// Rollouts believe. Unset, a gate believes any status file on the
	// status branch, that is anyone who can push to it.
	// +optional
	Fleet *RepositoryFleetSpec `json:"fleet,omitempty"`

	// ReleaseRules names the file on the tracked branch that declares the
	// release rules of this Repository's Rollouts (docs/coordination.md):
	// freezes, weekly windows in a time zone, and budgets of releases in
	// flight. While a freeze or window holds a Rollout, no release of it
	// starts and one under way starts no next step (unless it is past its
	// last gate); a release over budget waits in a queue before its first
	// step. Rollbacks always go on. Lifting a freeze is a merge that
	// removes it. A file that is missing or does not parse holds every
	// Rollout of the Repository and says why.
	// +optional
	ReleaseRules *ReleaseRulesSpec `json:"releaseRules,omitempty"`
}

// ReleaseRulesSpec locates a Repository's release rules file.
type ReleaseRulesSpec struct {
	// Path of the file from the root of the tracked branch, for example
	// clusters/prod/release-rules.yaml.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')",message="spec.releaseRules.path is relative to the root of the tracked branch, without .. (for example clusters/prod/release-rules.yaml)"
	Path string `json:"path"`
}

// RepositoryFleetSpec lists the clusters whose status files spec.fleet
// gates believe, and the keys each signs them with.
type RepositoryFleetSpec struct {
	// Trust lists the upstream clusters and the OpenPGP public keys their
	// controllers sign status files with (the signingKeyRef of their
	// Repository's spec.commit). A gate opens only on a status file with a
	// valid signature by a key of its own cluster beside it
	// (<cluster>/<namespace>/<name>.yaml.asc); a gate naming a cluster not
	// listed here holds and says so.
	// +listType=map
	// +listMapKey=cluster
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=50
	Trust []FleetTrust `json:"trust"`
}

// FleetTrust is one upstream cluster and the keys its status files must be
// signed with.
type FleetTrust struct {
	// Cluster is the upstream's spec.status.cluster.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Cluster string `json:"cluster"`
	// SignedBy names a Secret holding the cluster's ASCII-armored OpenPGP
	// public keys (every data key is read as a keyring; list two during a
	// key rotation).
	SignedBy LocalObjectReference `json:"signedBy"`
}

// TrustFor returns the entry of cluster, or nil.
func (f *RepositoryFleetSpec) TrustFor(cluster string) *FleetTrust {
	if f == nil {
		return nil
	}
	for i := range f.Trust {
		if f.Trust[i].Cluster == cluster {
			return &f.Trust[i]
		}
	}
	return nil
}

// WebhookSpec authenticates the calls of a forge's push webhook.
type WebhookSpec struct {
	// SecretRef names a Secret with the webhook's `token`, the secret set
	// on the forge's webhook. With it, a call counts only when it carries a
	// valid signature made with the token (GitHub X-Hub-Signature-256,
	// Gitea X-Gitea-Signature, Forgejo X-Forgejo-Signature) or the token
	// itself (GitLab X-Gitlab-Token); others are answered 401. Without it,
	// unsigned calls are accepted, at most one every 100 ms.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
}

// ApprovalPolicy restricts which approvals count, by the commit that
// brought each approval to the tracked branch. With any of its fields set,
// only approvals read from the tracked branch count (not spec.approvals of
// the Rollout object in the cluster), and the clone keeps the branch's
// whole history to find those commits.
type ApprovalPolicy struct {
	// SignedBy names a Secret holding ASCII-armored OpenPGP public keys
	// (every data key is read as a keyring). An approval counts only when
	// the commit that brought it to the tracked branch carries a valid
	// signature by one of them, made with a key that has not expired.
	// SSH signatures are not supported (go-git cannot verify them): a
	// commit signed only with SSH does not count.
	// +optional
	SignedBy *LocalObjectReference `json:"signedBy,omitempty"`
	// MergeOnly counts an approval only when the commit that brought it to
	// the tracked branch is a merge commit whose other parent carries the
	// approval (the approval branch, merged as a pull request). Direct
	// commits, squash and rebase merges, and fast-forwards do not count.
	// +optional
	MergeOnly bool `json:"mergeOnly,omitempty"`
	// Reviews counts an approval only when the forge (spec.forge) says
	// the approval branch's pull request was merged into the tracked
	// branch with at least MinApprovals approving reviews by users in
	// From, read from the forge's API when the gate would open.
	// +optional
	Reviews *ReviewPolicy `json:"reviews,omitempty"`
}

// ReviewPolicy asks for approving reviews on the forge before an approval
// counts. A review counts when it approves, is not dismissed, was made on
// the commit that was merged (a review of an older commit, pushed over
// since, does not), and is by a login in From other than the pull
// request's author; each login counts once.
type ReviewPolicy struct {
	// MinApprovals is how many approving reviews, by distinct logins in
	// From, the merged pull request needs.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	MinApprovals int32 `json:"minApprovals"`
	// From lists the forge logins whose reviews count (user names, not
	// teams: team membership is not read). Matched case-insensitively.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=255
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9_.][A-Za-z0-9_.-]*$`
	// +listType=set
	From []string `json:"from"`
}

// Enabled reports whether p restricts approvals.
func (p *ApprovalPolicy) Enabled() bool {
	return p != nil && (p.SignedBy != nil || p.MergeOnly || p.Reviews != nil)
}

// StatusWriteSpec says where progress files go.
type StatusWriteSpec struct {
	// Branch for progress files; kept apart from the tracked branch so that
	// progress commits never trigger a GitOps sync.
	// +kubebuilder:default="rollgate/status"
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Branch string `json:"branch,omitempty"`
	// Path, when set, writes progress into the tracked branch under this
	// directory instead of to Branch.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.contains('..')",message="spec.status.path must be a relative directory without '..'"
	// +optional
	Path string `json:"path,omitempty"`
	// Cluster, when set, writes the status files under a directory of
	// that name (<cluster>/<namespace>/<name>.yaml), so that the
	// controllers of several clusters share one status branch without
	// overwriting each other. Rollouts in other clusters name it in
	// spec.fleet.waitFor[].cluster.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// Window over which status changes are coalesced into one commit.
	// +kubebuilder:default="10s"
	// +optional
	Window *metav1.Duration `json:"window,omitempty"`
}

// CommitSpec configures rollgate's commits.
type CommitSpec struct {
	// AuthorName of commits.
	// +kubebuilder:default=rollgate
	// +kubebuilder:validation:MaxLength=256
	// +optional
	AuthorName string `json:"authorName,omitempty"`
	// AuthorEmail of commits.
	// +kubebuilder:default="rollgate@users.noreply.rollgate.dev"
	// +kubebuilder:validation:MaxLength=256
	// +optional
	AuthorEmail string `json:"authorEmail,omitempty"`
	// MessageTemplate is a Go text/template for status commit messages.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	MessageTemplate string `json:"messageTemplate,omitempty"`
	// SigningKeyRef names a Secret with an ASCII-armored OpenPGP private key
	// (`git.asc`, and `passphrase` when it is encrypted) that signs every
	// commit rollgate pushes. While the key cannot be used, rollgate pushes
	// nothing to the repository.
	// +optional
	SigningKeyRef *LocalObjectReference `json:"signingKeyRef,omitempty"`
}

// ForgeSpec configures a forge API for pull requests.
type ForgeSpec struct {
	// Provider of the forge API.
	// +kubebuilder:validation:Enum=github;gitlab;gitea
	Provider string `json:"provider"`
	// URL of the API, such as https://api.github.com.
	// +kubebuilder:validation:Pattern=`^https?://`
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`
	// Project is owner/name (GitHub, Gitea) or the project path (GitLab).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Project string `json:"project"`
	// SecretRef names a Secret with the API `token` and, for a forge
	// behind a private CA, the CA bundle `ca.crt` (PEM, trusted besides
	// the system's roots).
	SecretRef LocalObjectReference `json:"secretRef"`
}

// RepositoryStatus is what the controller last saw of the repository. It
// is written when it changes, not at every fetch.
type RepositoryStatus struct {
	// ObservedGeneration is the generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, True when the last fetch of the tracked branch and
	// the last write of progress succeeded; False with reason GitError
	// naming the error (credentials are never shown).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastFetchedCommit is the head of the tracked branch at the last
	// successful fetch.
	// +optional
	LastFetchedCommit string `json:"lastFetchedCommit,omitempty"`
	// LastFetchTime is when LastFetchedCommit was first fetched; later
	// fetches that find the same head leave it unchanged.
	// +optional
	LastFetchTime *metav1.Time `json:"lastFetchTime,omitempty"`
	// LastStatusCommit is the head of the status branch after the last
	// successful write of progress.
	// +optional
	LastStatusCommit string `json:"lastStatusCommit,omitempty"`
}

// GetConditions returns the status conditions.
func (in *Repository) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions sets the status conditions.
func (in *Repository) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }
