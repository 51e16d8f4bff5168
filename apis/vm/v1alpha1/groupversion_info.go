// Package v1alpha1 is the vm.virtpod.io/v1alpha1 API: VirtualMachine.
// +kubebuilder:object:generate=true
// +groupName=vm.virtpod.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "vm.virtpod.io", Version: "v1alpha1"}
	// SchemeBuilder registers the API's types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds the API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
