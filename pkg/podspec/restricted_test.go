package podspec_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// runnerPodShapes is every kind of runner pod: kernel and firmware boots, every disk kind, a
// root disk on a Filesystem and on a Block claim, both network modes, copied images, cloud-init,
// a resizable guest and a live migration's target.
func runnerPodShapes() map[string]*corev1.Pod {
	shapes := map[string]func(*vmv1.VirtualMachine, *podspec.Options){
		"kernel boot": func(*vmv1.VirtualMachine, *podspec.Options) {},
		"emulated":    func(vm *vmv1.VirtualMachine, _ *podspec.Options) { vm.Spec.Acceleration = vmv1.AccelerationEmulated },
		"firmware UEFI": func(vm *vmv1.VirtualMachine, _ *podspec.Options) {
			vm.Spec.Guest.KernelImage, vm.Spec.Guest.Firmware = "", "UEFI"
		},
		"every disk": func(vm *vmv1.VirtualMachine, o *podspec.Options) { withDisks(vm); o.Claims = claims() },
		"masquerade": func(vm *vmv1.VirtualMachine, _ *podspec.Options) { vm.Spec.Guest.NetworkMode = vmv1.NetworkMasquerade },
		"copied images": func(vm *vmv1.VirtualMachine, o *podspec.Options) {
			withDisks(vm)
			o.Claims, o.CopyImages = claims(), true
		},
		"cloud-init": func(vm *vmv1.VirtualMachine, _ *podspec.Options) {
			vm.Spec.Guest.CloudInit = &vmv1.CloudInit{SecretRef: vmv1.SecretReference{Name: "ud"}}
		},
		"resizable": func(vm *vmv1.VirtualMachine, _ *podspec.Options) { vm.Spec.Guest.MaxCPUs = ptr.To[int32](4) },
		"root block claim": func(vm *vmv1.VirtualMachine, o *podspec.Options) {
			vm.Spec.Guest.RootDisk = vmv1.RootDisk{PersistentVolumeClaim: &vmv1.RootDiskClaim{ClaimName: "web-root-dev"}}
			o.Claims = claims()
		},
		"root claim from image": func(vm *vmv1.VirtualMachine, o *podspec.Options) {
			vm.Spec.Guest.RootDisk.PersistentVolumeClaim = &vmv1.RootDiskClaim{ClaimName: "web-root"}
			vm.Spec.Guest.RootDisk.Size = ptr.To(resource.MustParse("4Gi"))
			o.Claims = claims()
		},
	}
	pods := map[string]*corev1.Pod{}
	for name, mutate := range shapes {
		vm, opts := baseVM(), podspec.DefaultOptions()
		mutate(vm, &opts)
		pods[name] = podspec.Build(vm, opts)
	}
	mig := &vmv1.VirtualMachineMigration{}
	mig.Name, mig.Namespace, mig.UID, mig.Spec.VMName = "move", "team-a", "5e1f", "web"
	pods["migration target"] = podspec.TargetPod(pods["masquerade"], mig, "pc-q35-7.2", "")
	return pods
}

// TestEveryRunnerPodIsRestricted: every runner pod passes Pod Security restricted, checked by
// the library the API server's admission runs (tests/e2e and controllers/vm check the admission
// itself), with no capability and not as root.
func TestEveryRunnerPodIsRestricted(t *testing.T) {
	for name, pod := range runnerPodShapes() {
		t.Run(name, func(t *testing.T) { checkUnprivileged(t, pod) })
	}
}

// TestRestrictedCheckCatches: the check above fails when a capability, a root user or a
// forbidden volume type comes back, so it cannot pass by accident.
func TestRestrictedCheckCatches(t *testing.T) {
	for name, mutate := range map[string]func(*corev1.Pod){
		"a capability": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		},
		"root": func(p *corev1.Pod) {
			p.Spec.SecurityContext.RunAsUser, p.Spec.SecurityContext.RunAsNonRoot = ptr.To[int64](0), nil
			p.Spec.Containers[0].SecurityContext.RunAsNonRoot = nil
		},
		"a hostPath volume": func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		},
		"privilege escalation": func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil },
	} {
		pod := podspec.Build(baseVM(), podspec.DefaultOptions())
		mutate(pod)
		if bad := restrictedViolations(pod); bad == "" {
			t.Errorf("%s: the restricted check passed the pod", name)
		} else if !strings.Contains(bad, " (") {
			t.Errorf("%s: %q names no field", name, bad)
		}
	}
}
