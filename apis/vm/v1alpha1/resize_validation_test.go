package v1alpha1_test

import (
	"context"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// resizable is a VM created to be resized live: 1 of 4 CPUs, 256Mi of 1Gi.
func resizable(name string) *vmv1.VirtualMachine {
	vm := kubeapi.SampleVM("default", name)
	vm.Spec.Guest.MaxCPUs = ptr.To[int32](4)
	vm.Spec.Guest.MaxMemory = q("1Gi")
	return vm
}

// TestResizeBounds: the sizes a resizable VM may be created with, each refused one naming the
// field and the fix.
func TestResizeBounds(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name   string
		mutate func(*vmv1.VirtualMachine)
		field  string
		hint   string
	}{
		{"cpus above maxCPUs", func(v *vmv1.VirtualMachine) { v.Spec.Guest.CPUs = 5 }, "spec.guest.cpus", "must not be above spec.guest.maxCPUs: lower cpus"},
		{"memory above maxMemory", func(v *vmv1.VirtualMachine) { v.Spec.Guest.Memory = resource.MustParse("2Gi") }, "spec.guest.memory", "must not be above spec.guest.maxMemory: lower memory"},
		{"memory not a block multiple", func(v *vmv1.VirtualMachine) { v.Spec.Guest.Memory = resource.MustParse("300Mi") }, "spec.guest.memory", "multiples of 128Mi"},
		{"maxMemory not a block multiple", func(v *vmv1.VirtualMachine) { v.Spec.Guest.MaxMemory = q("1000Mi") }, "spec.guest.memory", "multiples of 128Mi"},
		{"maxCPUs zero", func(v *vmv1.VirtualMachine) { v.Spec.Guest.MaxCPUs = ptr.To[int32](0) }, "spec.guest.maxCPUs", "greater than or equal to 1"},
		{"maxCPUs too many", func(v *vmv1.VirtualMachine) { v.Spec.Guest.MaxCPUs = ptr.To[int32](256) }, "spec.guest.maxCPUs", "less than or equal to 255"},
		{"maxMemory too large", func(v *vmv1.VirtualMachine) { v.Spec.Guest.MaxMemory = q("2Ti") }, "spec.guest.maxMemory", "between 64Mi and 1Ti"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vm := resizable(fmt.Sprintf("resize-bad-%d", i))
			tc.mutate(vm)
			refused(t, env.Client.Create(ctx, vm), true, tc.field, tc.hint)
		})
	}
	t.Run("fixed size need not be a block multiple", func(t *testing.T) {
		vm := kubeapi.SampleVM("default", "resize-fixed")
		vm.Spec.Guest.Memory = resource.MustParse("300Mi")
		vm.Spec.Guest.MaxMemory = q("300Mi")
		if err := env.Client.Create(ctx, vm); err != nil {
			t.Fatalf("maxMemory equal to memory was refused: %v", err)
		}
	})
}

// TestResizeChanges: on a resizable VM cpus and memory change within their bounds, and the
// bounds themselves never change.
func TestResizeChanges(t *testing.T) {
	ctx := context.Background()
	base := resizable("resize-changes")
	if err := env.Client.Create(ctx, base); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		mutate func(*vmv1.VirtualMachine)
		field  string // empty: accepted
	}{
		{"grow to the max", func(v *vmv1.VirtualMachine) { v.Spec.Guest.CPUs, v.Spec.Guest.Memory = 4, resource.MustParse("1Gi") }, ""},
		{"grow part way", func(v *vmv1.VirtualMachine) { v.Spec.Guest.CPUs, v.Spec.Guest.Memory = 3, resource.MustParse("768Mi") }, ""},
		{"shrink below the boot size", func(v *vmv1.VirtualMachine) { v.Spec.Guest.Memory = resource.MustParse("128Mi") }, ""},
		{"above maxCPUs", func(v *vmv1.VirtualMachine) { v.Spec.Guest.CPUs = 5 }, "spec.guest.cpus must not be above spec.guest.maxCPUs"},
		{"below 1", func(v *vmv1.VirtualMachine) { v.Spec.Guest.CPUs = 0 }, "greater than or equal to 1"},
		{"above maxMemory", func(v *vmv1.VirtualMachine) { v.Spec.Guest.Memory = resource.MustParse("1152Mi") }, "spec.guest.memory must not be above spec.guest.maxMemory"},
		{"not a block multiple", func(v *vmv1.VirtualMachine) { v.Spec.Guest.Memory = resource.MustParse("500Mi") }, "multiples of 128Mi"},
		{"maxCPUs changed", func(v *vmv1.VirtualMachine) { v.Spec.Guest.MaxCPUs = ptr.To[int32](8) }, "spec.guest.maxCPUs is immutable"},
		{"maxCPUs removed", func(v *vmv1.VirtualMachine) { v.Spec.Guest.MaxCPUs = nil }, "spec.guest.maxCPUs is immutable"},
		{"maxMemory changed", func(v *vmv1.VirtualMachine) { v.Spec.Guest.MaxMemory = q("2Gi") }, "spec.guest.maxMemory is immutable"},
		{"maxMemory removed", func(v *vmv1.VirtualMachine) { v.Spec.Guest.MaxMemory = nil }, "spec.guest.maxMemory is immutable"},
		{"maxMemory written another way", func(v *vmv1.VirtualMachine) { v.Spec.Guest.MaxMemory = q("1024Mi") }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vm := &vmv1.VirtualMachine{}
			if err := env.Client.Get(ctx, clientKey(base), vm); err != nil {
				t.Fatal(err)
			}
			tc.mutate(vm)
			err := env.Client.Update(ctx, vm)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("a change within the bounds was refused: %v", err)
				}
				return
			}
			if err == nil || !apierrors.IsInvalid(err) {
				t.Fatalf("want Invalid naming %q, got %v", tc.field, err)
			}
			refused(t, err, true, tc.field)
		})
	}
}
