// Package v1alpha1 contains the rollgate.dev/v1alpha1 API: Rollout,
// AnalysisTemplate and Repository.
//
// Field names follow OpenKruise Rollout v1beta1 wherever the concept is the
// same, so that a Kruise user can move by changing little more than the
// apiVersion. Human intent (approvals, abort, promote, retry) lives in spec, so
// that it can be written by a merged pull request; status is only ever written
// by the controller.
//
// +kubebuilder:object:generate=true
// +groupName=rollgate.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of this API.
var GroupVersion = schema.GroupVersion{Group: "rollgate.dev", Version: "v1alpha1"}

// AddToScheme registers the types of this API with s.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Rollout{}, &RolloutList{},
		&AnalysisTemplate{}, &AnalysisTemplateList{},
		&Repository{}, &RepositoryList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
