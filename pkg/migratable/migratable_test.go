package migratable_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/migratable"
	"github.com/virtpod/virtpod/pkg/podspec"
)

func vm() *vmv1.VirtualMachine {
	return &vmv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: vmv1.VirtualMachineSpec{Provider: vmv1.ProviderQEMU, Acceleration: vmv1.AccelerationEmulated, Guest: vmv1.GuestSpec{
			CPUs: 1, Memory: resource.MustParse("256Mi"), MaxCPUs: ptr(int32(2)), KernelImage: "k/kernel:1",
			RootDisk: vmv1.RootDisk{Image: "k/disk:1"}, NetworkMode: vmv1.NetworkMasquerade,
		}},
	}
}

func ptr[T any](v T) *T { return &v }

// TestCheck: each refusal has its reason and a message naming the field and the fix; what is
// checked is what runs (the pod) as well as the spec.
func TestCheck(t *testing.T) {
	cases := []struct {
		name       string
		vm         func(*vmv1.VirtualMachine)
		pod        func(*corev1.Pod)
		reason     string
		field, fix string
	}{
		{"migratable", nil, nil, vmv1.ReasonMigratable, "", ""},
		{"cloud-hypervisor", func(v *vmv1.VirtualMachine) { v.Spec.Provider = vmv1.ProviderCloudHypervisor }, nil,
			vmv1.ReasonProviderNotMigratable, "spec.provider", "provider qemu"},
		{"pod network", func(v *vmv1.VirtualMachine) { v.Spec.Guest.NetworkMode = "" }, nil,
			vmv1.ReasonNetworkNotMigratable, "spec.guest.networkMode", "Masquerade"},
		{"masquerade not yet applied", nil, func(p *corev1.Pod) { setArg(p, "--network=", "pod") },
			vmv1.ReasonNetworkNotMigratable, "spec.guest.networkMode", "vmctl restart web"},
		{"resize asked in the spec", func(v *vmv1.VirtualMachine) { v.Spec.Guest.CPUs = 2 }, nil,
			vmv1.ReasonGuestResized, "spec.guest asks for 2 CPUs", "vmctl restart web"},
		{"guest grew and was asked back", nil, func(p *corev1.Pod) {
			p.Annotations = map[string]string{vmv1.AnnotationGuestCPUs: "2", vmv1.AnnotationDesiredCPUs: "1"}
		}, vmv1.ReasonGuestResized, vmv1.AnnotationGuestCPUs + " 2", "vmctl restart web"},
		{"memory reported larger", nil, func(p *corev1.Pod) { p.Annotations = map[string]string{vmv1.AnnotationGuestMemory: "384Mi"} },
			vmv1.ReasonGuestResized, vmv1.AnnotationGuestMemory, "restart"},
		{"virtio-fs shares", nil, func(p *corev1.Pod) {
			p.Spec.Containers[0].Args = append(p.Spec.Containers[0].Args, "--filesystem=tag=web,path=/virtpod/fs/web", "--filesystem=tag=conf,path=/virtpod/fs/conf,readonly")
		}, vmv1.ReasonFilesystemNotMigratable, "virtio-fs filesystems (web, conf", "remove spec.guest.filesystems and restart the VM"},
		{"shares and the pod network: the shares are named first", func(v *vmv1.VirtualMachine) { v.Spec.Guest.NetworkMode = vmv1.NetworkPod }, func(p *corev1.Pod) {
			p.Spec.Containers[0].Args = append(p.Spec.Containers[0].Args, "--filesystem=tag=web,path=/virtpod/fs/web")
		}, vmv1.ReasonFilesystemNotMigratable, "virtio-fs filesystems (web", "remove spec.guest.filesystems"},
		{"reported at boot size", nil, func(p *corev1.Pod) {
			p.Annotations = map[string]string{vmv1.AnnotationGuestCPUs: "1", vmv1.AnnotationGuestMemory: "256Mi", vmv1.AnnotationDesiredMemory: "268435456"}
		}, vmv1.ReasonMigratable, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := vm()
			pod := podspec.Build(base, podspec.DefaultOptions())
			v := base.DeepCopy()
			if tc.vm != nil {
				tc.vm(v)
			}
			if tc.pod != nil {
				tc.pod(pod)
			}
			got := migratable.Check(v, pod)
			if got.Reason != tc.reason || got.OK() != (tc.reason == vmv1.ReasonMigratable) {
				t.Fatalf("reason %s (%s), want %s", got.Reason, got.Message, tc.reason)
			}
			if !strings.Contains(got.Message, tc.field) || !strings.Contains(got.Message, tc.fix) {
				t.Errorf("message %q does not name %q and the fix %q", got.Message, tc.field, tc.fix)
			}
		})
	}
}

// TestCheckClaims: a guest moves with the claims a second node can attach (ReadWriteMany, or
// ReadOnlyMany read-only), as its runner pod's flags record them; any other claim refuses, named
// by its field, with the fix.
func TestCheckClaims(t *testing.T) {
	rootClaim := func(v *vmv1.VirtualMachine) {
		v.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: "web-root"}
	}
	cases := []struct {
		name       string
		vm         func(*vmv1.VirtualMachine)
		claims     map[string]podspec.Claim
		reason     string
		field, fix string
	}{
		// Copied into claims made for the target.
		{"root disk on a ReadWriteOnce claim", rootClaim, map[string]podspec.Claim{"web-root": {}},
			vmv1.ReasonMigratable, "", ""},
		{"data disk on a ReadWriteOnce claim", withData(false), map[string]podspec.Claim{"data-1": {Block: true}},
			vmv1.ReasonMigratable, "", ""},
		{"read-only disk on a ReadWriteOnce claim", withData(true), map[string]podspec.Claim{"data-1": {}},
			vmv1.ReasonDiskNotMigratable, "spec.guest.disks[1] (data) is on claim data-1", "spec.evictionStrategy None"},
		{"claims a second node attaches", func(v *vmv1.VirtualMachine) {
			withData(false)(v)
			rootClaim(v)
			v.Spec.Guest.Disks = append(v.Spec.Guest.Disks, vmv1.Disk{Name: "ro", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "ro-1", ReadOnly: true}})
		}, map[string]podspec.Claim{"web-root": {ReadWriteMany: true}, "data-1": {Block: true, ReadWriteMany: true}, "ro-1": {ReadOnlyMany: true}},
			vmv1.ReasonMigratable, "", ""},
		{"read-only disk on a ReadOnlyMany claim, the root on a ReadWriteOnce one", func(v *vmv1.VirtualMachine) { withData(true)(v); rootClaim(v) },
			map[string]podspec.Claim{"web-root": {ReadOnlyMany: true}, "data-1": {ReadOnlyMany: true}},
			vmv1.ReasonMigratable, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := vm()
			tc.vm(v)
			opts := podspec.DefaultOptions()
			opts.Claims = tc.claims
			got := migratable.Check(v, podspec.Build(v, opts))
			if got.Reason != tc.reason {
				t.Fatalf("reason %s (%s), want %s", got.Reason, got.Message, tc.reason)
			}
			if !strings.Contains(got.Message, tc.field) || !strings.Contains(got.Message, tc.fix) {
				t.Errorf("message %q does not name %q and the fix %q", got.Message, tc.field, tc.fix)
			}
		})
	}
	// The spec no longer names the claim, the running guest still uses it: what runs is what moves.
	started := vm()
	withData(true)(started)
	opts := podspec.DefaultOptions()
	opts.Claims = map[string]podspec.Claim{"data-1": {}}
	if got := migratable.Check(vm(), podspec.Build(started, opts)); got.Reason != vmv1.ReasonDiskNotMigratable ||
		!strings.Contains(got.Message, "a disk the running guest started with is on claim data-1") {
		t.Errorf("claim removed from the spec, still in the running pod: %+v", got)
	}
}

// TestCopiedClaims: the writable claims only one node attaches, by disk, root first; not the
// shared, read-only or emptyDir ones.
func TestCopiedClaims(t *testing.T) {
	v := vm()
	withData(false)(v)
	v.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: "web-root"}
	v.Spec.Guest.Disks = append(v.Spec.Guest.Disks,
		vmv1.Disk{Name: "shared", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "shared-1"}},
		vmv1.Disk{Name: "ro", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "ro-1", ReadOnly: true}})
	opts := podspec.DefaultOptions()
	opts.Claims = map[string]podspec.Claim{"web-root": {}, "data-1": {Block: true}, "shared-1": {ReadWriteMany: true}, "ro-1": {}}
	got := migratable.CopiedClaims(podspec.Build(v, opts))
	want := []vmv1.MigratedClaim{{Disk: "root", Source: "web-root"}, {Disk: "data", Source: "data-1"}}
	if !slices.Equal(got, want) {
		t.Errorf("CopiedClaims %+v, want %+v", got, want)
	}
}

// withData adds an empty disk and a data disk on claim data-1.
func withData(readOnly bool) func(*vmv1.VirtualMachine) {
	return func(v *vmv1.VirtualMachine) {
		v.Spec.Guest.Disks = []vmv1.Disk{{Name: "scratch", EmptyDisk: &vmv1.EmptyDiskSource{Size: resource.MustParse("1Gi")}},
			{Name: "data", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "data-1", ReadOnly: readOnly}}}
	}
}

func setArg(p *corev1.Pod, prefix, value string) {
	for i, a := range p.Spec.Containers[0].Args {
		if strings.HasPrefix(a, prefix) {
			p.Spec.Containers[0].Args[i] = prefix + value
		}
	}
}
