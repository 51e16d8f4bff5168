package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(m, &env) }

func q(s string) *resource.Quantity { r := resource.MustParse(s); return &r }

// TestRejectsBadSpecs applies each invalid VirtualMachine to the real API server and checks it is
// refused with a message that names the field and says what is wanted.
func TestRejectsBadSpecs(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name   string
		mutate func(*vmv1.VirtualMachine)
		field  string // the field path the error must name
		hint   string // a fragment of the fix the error must state
	}{
		{"zero cpus", func(v *vmv1.VirtualMachine) { v.Spec.Guest.CPUs = 0 }, "spec.guest.cpus", "greater than or equal to 1"},
		// A VM that could request the agent's own device would starve it after a restart; one
		// that could request GPUs would take them without the admin's say.
		{"podResources with the agent's device", func(v *vmv1.VirtualMachine) {
			v.Spec.PodResources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{"devices.virtpod.io/kvm-probe": resource.MustParse("1")}}
		}, "spec.podResources", "only cpu and memory requests and limits"},
		{"podResources with a GPU request", func(v *vmv1.VirtualMachine) {
			v.Spec.PodResources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{"cpu": resource.MustParse("1"), "nvidia.com/gpu": resource.MustParse("1")}}
		}, "spec.podResources", "remove the other resources"},
		{"podResources with claims", func(v *vmv1.VirtualMachine) {
			v.Spec.PodResources = &corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}
		}, "spec.podResources", "takes no resource claims"},
		{"too many cpus", func(v *vmv1.VirtualMachine) { v.Spec.Guest.CPUs = 256 }, "spec.guest.cpus", "less than or equal to 255"},
		{"memory below minimum", func(v *vmv1.VirtualMachine) { v.Spec.Guest.Memory = resource.MustParse("32Mi") }, "spec.guest.memory", "between 64Mi and 1Ti"},
		{"memory above maximum", func(v *vmv1.VirtualMachine) { v.Spec.Guest.Memory = resource.MustParse("2Ti") }, "spec.guest.memory", "between 64Mi and 1Ti"},
		{"kernel args without a kernel", func(v *vmv1.VirtualMachine) { v.Spec.Guest.KernelImage = ""; v.Spec.Guest.KernelArgs = "quiet" },
			"spec.guest.kernelArgs", "set kernelImage or remove kernelArgs"},
		{"firmware with a kernel", func(v *vmv1.VirtualMachine) { v.Spec.Guest.Firmware = vmv1.FirmwareUEFI }, "spec.guest.firmware", "remove one of them"},
		{"unknown firmware", func(v *vmv1.VirtualMachine) { v.Spec.Guest.KernelImage = ""; v.Spec.Guest.Firmware = "CSM" },
			"spec.guest.firmware", `"BIOS", "UEFI"`},
		{"probe with no check", func(v *vmv1.VirtualMachine) { v.Spec.Guest.ReadinessProbe = &vmv1.GuestProbe{} },
			"spec.guest.readinessProbe", "exactly one of tcpSocket or httpGet"},
		{"probe with two checks", func(v *vmv1.VirtualMachine) {
			v.Spec.Guest.ReadinessProbe = &vmv1.GuestProbe{TCPSocket: &vmv1.TCPProbe{Port: 22}, HTTPGet: &vmv1.HTTPProbe{Port: 80}}
		}, "spec.guest.readinessProbe", "exactly one of tcpSocket or httpGet"},
		{"probe port zero", func(v *vmv1.VirtualMachine) {
			v.Spec.Guest.ReadinessProbe = &vmv1.GuestProbe{TCPSocket: &vmv1.TCPProbe{}}
		},
			"spec.guest.readinessProbe.tcpSocket.port", "greater than or equal to 1"},
		{"probe path not absolute", func(v *vmv1.VirtualMachine) {
			v.Spec.Guest.ReadinessProbe = &vmv1.GuestProbe{HTTPGet: &vmv1.HTTPProbe{Port: 80, Path: "healthz"}}
		}, "spec.guest.readinessProbe.httpGet.path", "absolute path such as /healthz"},
		{"probe path with a space", func(v *vmv1.VirtualMachine) {
			v.Spec.Guest.ReadinessProbe = &vmv1.GuestProbe{HTTPGet: &vmv1.HTTPProbe{Port: 80, Path: "/a b"}}
		}, "spec.guest.readinessProbe.httpGet.path", "without spaces"},
		{"bad kernel image", func(v *vmv1.VirtualMachine) { v.Spec.Guest.KernelImage = "Not An Image!" }, "spec.guest.kernelImage", "image reference such as"},
		{"bad disk image", func(v *vmv1.VirtualMachine) { v.Spec.Guest.RootDisk.Image = "registry/UPPER:tag" }, "spec.guest.rootDisk.image", "image reference such as"},
		{"disk image with scheme", func(v *vmv1.VirtualMachine) { v.Spec.Guest.RootDisk.Image = "https://registry/disk:v1" }, "spec.guest.rootDisk.image", "image reference such as"},
		{"bad runner image", func(v *vmv1.VirtualMachine) { v.Spec.RunnerImage = "runner:" }, "spec.runnerImage", "image reference such as"},
		{"unknown provider", func(v *vmv1.VirtualMachine) { v.Spec.Provider = "firecracker" }, "spec.provider", `"qemu", "cloud-hypervisor"`},
		{"unknown acceleration", func(v *vmv1.VirtualMachine) { v.Spec.Acceleration = "Fast" }, "spec.acceleration", `"KVM", "Emulated"`},
		{"cloud-hypervisor emulated", func(v *vmv1.VirtualMachine) { v.Spec.Provider = vmv1.ProviderCloudHypervisor }, "spec.acceleration", "use acceleration KVM or provider qemu"},
		{"unknown display", func(v *vmv1.VirtualMachine) { v.Spec.Guest.Display = "SPICE" }, "spec.guest.display", `"VNC", "None"`},
		{"cloud-hypervisor with a VNC display", func(v *vmv1.VirtualMachine) {
			v.Spec.Provider, v.Spec.Acceleration, v.Spec.Guest.Display = vmv1.ProviderCloudHypervisor, vmv1.AccelerationKVM, vmv1.DisplayVNC
		}, "spec.guest.display", "use display None or leave it empty"},
		{"bad run strategy", func(v *vmv1.VirtualMachine) { v.Spec.RunStrategy = "Sometimes" }, "spec.runStrategy", `"Always", "RerunOnFailure", "Once", "Manual", "Halted"`},
		{"restartPolicy's old value", func(v *vmv1.VirtualMachine) { v.Spec.RunStrategy = "Never" }, "spec.runStrategy", `"Always", "RerunOnFailure", "Once", "Manual", "Halted"`},
		{"negative grace period", func(v *vmv1.VirtualMachine) { v.Spec.TerminationGracePeriodSeconds = ptr.To[int64](-1) }, "spec.terminationGracePeriodSeconds", "greater than or equal to 0"},
		{"grace period too long", func(v *vmv1.VirtualMachine) { v.Spec.TerminationGracePeriodSeconds = ptr.To[int64](4000) }, "spec.terminationGracePeriodSeconds", "less than or equal to 3600"},
		{"duplicate port names", func(v *vmv1.VirtualMachine) {
			v.Spec.Guest.Ports = []vmv1.Port{{Name: "http", Port: 80}, {Name: "http", Port: 8080}}
		}, "spec.guest.ports[1]", "Duplicate value"},
		{"port zero", func(v *vmv1.VirtualMachine) { v.Spec.Guest.Ports = []vmv1.Port{{Name: "http", Port: 0}} }, "spec.guest.ports[0].port", "greater than or equal to 1"},
		{"port out of range", func(v *vmv1.VirtualMachine) { v.Spec.Guest.Ports = []vmv1.Port{{Name: "http", Port: 70000}} }, "spec.guest.ports[0].port", "less than or equal to 65535"},
		{"unknown protocol", func(v *vmv1.VirtualMachine) {
			v.Spec.Guest.Ports = []vmv1.Port{{Name: "sctp", Port: 9, Protocol: corev1.ProtocolSCTP}}
		}, "spec.guest.ports[0].protocol", `"TCP", "UDP"`},
		{"upper-case port name", func(v *vmv1.VirtualMachine) { v.Spec.Guest.Ports = []vmv1.Port{{Name: "HTTP", Port: 80}} }, "spec.guest.ports[0].name", "IANA service name"},
		{"numeric port name", func(v *vmv1.VirtualMachine) { v.Spec.Guest.Ports = []vmv1.Port{{Name: "8080", Port: 80}} }, "spec.guest.ports[0].name", "at least one letter"},
		{"long port name", func(v *vmv1.VirtualMachine) {
			v.Spec.Guest.Ports = []vmv1.Port{{Name: "a-very-long-port-name", Port: 80}}
		}, "spec.guest.ports[0].name", "may not be more than 15"},
		{"double hyphen in port name", func(v *vmv1.VirtualMachine) { v.Spec.Guest.Ports = []vmv1.Port{{Name: "a--b", Port: 80}} }, "spec.guest.ports[0].name", "single '-'"},
		{"bad node selector key", func(v *vmv1.VirtualMachine) { v.Spec.NodeSelector = map[string]string{"Bad Key!": "x"} }, "spec.nodeSelector", "label keys such as"},
		{"unknown toleration operator", func(v *vmv1.VirtualMachine) {
			v.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: "Maybe"}}
		}, "spec.tolerations", "Exists or Equal"},
		{"unknown toleration effect", func(v *vmv1.VirtualMachine) {
			v.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Effect: "Sometimes"}}
		}, "spec.tolerations", "NoSchedule, PreferNoSchedule or NoExecute"},
		{"keyless Equal toleration", func(v *vmv1.VirtualMachine) {
			v.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpEqual, Value: "x"}}
		}, "spec.tolerations", "without a key must have operator Exists"},
		{"Exists toleration with a value", func(v *vmv1.VirtualMachine) {
			v.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Value: "x"}}
		}, "spec.tolerations", "takes no value"},
		{"tolerationSeconds without NoExecute", func(v *vmv1.VirtualMachine) {
			v.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule, TolerationSeconds: ptr.To[int64](30)}}
		}, "spec.tolerations", "needs effect NoExecute"},
		{"multi-line kernel args", func(v *vmv1.VirtualMachine) { v.Spec.Guest.KernelArgs = "console=ttyS0\ninit=/bin/sh" }, "spec.guest.kernelArgs", "single line"},
		{"tiny root disk", func(v *vmv1.VirtualMachine) { v.Spec.Guest.RootDisk.Size = q("1Mi") }, "spec.guest.rootDisk.size", "between 64Mi and 64Ti"},
		{"name too long for a pod", func(v *vmv1.VirtualMachine) { v.Name = strings.Repeat("a", 57) }, "metadata.name", "at most 56 characters"},
		{"name not a DNS label", func(v *vmv1.VirtualMachine) { v.Name = "web.1" }, "metadata.name", "DNS label"},
		{"cloud-init secret without a name", func(v *vmv1.VirtualMachine) { v.Spec.Guest.CloudInit = &vmv1.CloudInit{} }, "spec.guest.cloudInit.secretRef.name", "at least 1"},
		{"cloud-init secret name not a DNS subdomain", func(v *vmv1.VirtualMachine) {
			v.Spec.Guest.CloudInit = &vmv1.CloudInit{SecretRef: vmv1.SecretReference{Name: "Bootstrap_Data"}}
		}, "spec.guest.cloudInit.secretRef.name", "DNS subdomain"},
		{"cloud-init secret name too long", func(v *vmv1.VirtualMachine) {
			v.Spec.Guest.CloudInit = &vmv1.CloudInit{SecretRef: vmv1.SecretReference{Name: strings.Repeat("a", 254)}}
		}, "spec.guest.cloudInit.secretRef.name", "may not be more than 253"},
		{"cloud-init user-data key with a slash", func(v *vmv1.VirtualMachine) {
			v.Spec.Guest.CloudInit = &vmv1.CloudInit{SecretRef: vmv1.SecretReference{Name: "boot"}, UserDataKey: "../etc/shadow"}
		}, "spec.guest.cloudInit.userDataKey", "must be a Secret key such as value"},
		{"cloud-init network-data key is dot-dot", func(v *vmv1.VirtualMachine) {
			v.Spec.Guest.CloudInit = &vmv1.CloudInit{SecretRef: vmv1.SecretReference{Name: "boot"}, NetworkDataKey: ".."}
		}, "spec.guest.cloudInit.networkDataKey", "must be a Secret key such as network-config"},
		{"cloud-init network data from the user-data key", func(v *vmv1.VirtualMachine) {
			v.Spec.Guest.CloudInit = &vmv1.CloudInit{SecretRef: vmv1.SecretReference{Name: "boot"}, NetworkDataKey: "value"}
		}, "spec.guest.cloudInit.networkDataKey", "different Secret key than userDataKey"},
		{"too many ports", func(v *vmv1.VirtualMachine) {
			for i := range 33 {
				v.Spec.Guest.Ports = append(v.Spec.Guest.Ports, vmv1.Port{Name: fmt.Sprintf("p%d", i), Port: int32(1000 + i)})
			}
		}, "spec.guest.ports", "must have at most 32 items"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vm := kubeapi.SampleVM("default", fmt.Sprintf("bad-%d", i))
			tc.mutate(vm)
			refused(t, env.Client.Create(ctx, vm), true, tc.field, tc.hint)
		})
	}
}

// refused checks that the API server refused a VirtualMachine, as Invalid when invalid is set,
// with an error that mentions each of the words.
func refused(t *testing.T, err error, invalid bool, mentions ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("the API server accepted an invalid VirtualMachine")
	}
	if invalid && !apierrors.IsInvalid(err) {
		t.Fatalf("want an Invalid error, got %v", err)
	}
	for _, want := range mentions {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
}

// TestRejectsImmutableChanges checks that what cannot change on a running guest is refused on
// update, naming the field, while what applies at the next start can change.
func TestRejectsImmutableChanges(t *testing.T) {
	ctx := context.Background()
	base := kubeapi.SampleVM("default", "immutable")
	base.Spec.Provider = vmv1.ProviderQEMU
	base.Spec.Guest.RootDisk.Size = q("1Gi")
	if err := env.Client.Create(ctx, base); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		mutate func(*vmv1.VirtualMachine)
		field  string
	}{
		{"cpus", func(v *vmv1.VirtualMachine) { v.Spec.Guest.CPUs = 2 }, "spec.guest.cpus is immutable on a VirtualMachine created without spec.guest.maxCPUs"},
		{"memory", func(v *vmv1.VirtualMachine) { v.Spec.Guest.Memory = resource.MustParse("512Mi") }, "spec.guest.memory is immutable on a VirtualMachine created without spec.guest.maxMemory"},
		{"maxCPUs added", func(v *vmv1.VirtualMachine) { v.Spec.Guest.MaxCPUs = ptr.To[int32](4) }, "spec.guest.maxCPUs is immutable"},
		{"maxMemory added", func(v *vmv1.VirtualMachine) { v.Spec.Guest.MaxMemory = q("1Gi") }, "spec.guest.maxMemory is immutable"},
		{"provider", func(v *vmv1.VirtualMachine) {
			v.Spec.Provider = vmv1.ProviderCloudHypervisor
			v.Spec.Acceleration = vmv1.AccelerationKVM
		}, "spec.provider is immutable"},
		{"acceleration", func(v *vmv1.VirtualMachine) { v.Spec.Acceleration = vmv1.AccelerationKVM }, "spec.acceleration is immutable"},
		{"disk size", func(v *vmv1.VirtualMachine) { v.Spec.Guest.RootDisk.Size = q("2Gi") }, "spec.guest.rootDisk.size is immutable"},
		{"disk size removed", func(v *vmv1.VirtualMachine) { v.Spec.Guest.RootDisk.Size = nil }, "spec.guest.rootDisk.size is immutable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vm := &vmv1.VirtualMachine{}
			if err := env.Client.Get(ctx, clientKey(base), vm); err != nil {
				t.Fatal(err)
			}
			tc.mutate(vm)
			err := env.Client.Update(ctx, vm)
			if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("want Invalid naming %q, got %v", tc.field, err)
			}
		})
	}
	t.Run("images and kernel args may change", func(t *testing.T) {
		vm := &vmv1.VirtualMachine{}
		if err := env.Client.Get(ctx, clientKey(base), vm); err != nil {
			t.Fatal(err)
		}
		vm.Spec.Guest.KernelImage = "localhost/virtpod/guest:v2"
		vm.Spec.Guest.RootDisk.Image = "localhost/virtpod/guest:v2"
		vm.Spec.Guest.KernelArgs = "quiet"
		if err := env.Client.Update(ctx, vm); err != nil {
			t.Fatalf("a change that applies at the next start was refused: %v", err)
		}
	})
}

// TestDefaults checks what the API server fills in for a minimal VirtualMachine.
func TestDefaults(t *testing.T) {
	ctx := context.Background()
	vm := &vmv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "defaults"},
		Spec: vmv1.VirtualMachineSpec{Guest: vmv1.GuestSpec{
			CPUs: 1, Memory: resource.MustParse("64Mi"),
			KernelImage: "registry.example.com:5000/vm/kernel@sha256:" + strings.Repeat("a", 64),
			RootDisk:    vmv1.RootDisk{Image: "disk"},
			Ports:       []vmv1.Port{{Name: "ssh", Port: 22}},
		}},
	}
	if err := env.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	s := vm.Spec
	if s.Guest.CloudInit != nil {
		t.Fatalf("cloudInit defaulted into a VM without it: %+v", s.Guest.CloudInit)
	}
	if s.Provider != "" || s.Acceleration != vmv1.AccelerationKVM || s.RunStrategy != vmv1.RunAlways || s.RunRequestedAt != nil ||
		s.TerminationGracePeriodSeconds == nil || *s.TerminationGracePeriodSeconds != 30 || s.Guest.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Fatalf("defaults not applied: %+v", s)
	}
}

// TestFirmwareBoot: a guest without a kernel image is valid, with or without a firmware named,
// and a readiness probe of either kind is accepted.
func TestFirmwareBoot(t *testing.T) {
	ctx := context.Background()
	for i, fw := range []vmv1.Firmware{"", vmv1.FirmwareBIOS, vmv1.FirmwareUEFI} {
		vm := kubeapi.SampleVM("default", fmt.Sprintf("firmware-%d", i))
		vm.Spec.Guest.KernelImage, vm.Spec.Guest.Firmware = "", fw
		vm.Spec.Guest.ReadinessProbe = &vmv1.GuestProbe{TCPSocket: &vmv1.TCPProbe{Port: 22}}
		if i == 2 {
			vm.Spec.Guest.ReadinessProbe = &vmv1.GuestProbe{HTTPGet: &vmv1.HTTPProbe{Port: 8080, Path: "/healthz?full=1"}}
		}
		if err := env.Client.Create(ctx, vm); err != nil {
			t.Fatalf("firmware %q refused: %v", fw, err)
		}
		if vm.Spec.Guest.KernelImage != "" || vm.Spec.Guest.Firmware != fw {
			t.Fatalf("the API server changed the boot: kernelImage %q firmware %q", vm.Spec.Guest.KernelImage, vm.Spec.Guest.Firmware)
		}
	}
}

// TestCloudInitDefaults: a cloud-init seed reads the key Cluster API bootstrap Secrets use unless
// told otherwise, and any valid Secret name and keys are accepted.
func TestCloudInitDefaults(t *testing.T) {
	ctx := context.Background()
	vm := kubeapi.SampleVM("default", "cloud-init")
	vm.Spec.Guest.CloudInit = &vmv1.CloudInit{SecretRef: vmv1.SecretReference{Name: "web-1.bootstrap"}}
	if err := env.Client.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	if got := vm.Spec.Guest.CloudInit.UserDataKey; got != "value" {
		t.Fatalf("userDataKey defaulted to %q, want value", got)
	}
	vm.Spec.Guest.CloudInit.UserDataKey, vm.Spec.Guest.CloudInit.NetworkDataKey = "user_data.yaml", "network-config"
	if err := env.Client.Update(ctx, vm); err != nil {
		t.Fatalf("valid keys refused (they apply at the next start): %v", err)
	}
}

// TestProviderClassValidation: a class names a known hypervisor, keeps it, and is enabled by
// default.
func TestProviderClassValidation(t *testing.T) {
	ctx := context.Background()
	bad := &vmv1.ProviderClass{ObjectMeta: metav1.ObjectMeta{Name: "fc"}, Spec: vmv1.ProviderClassSpec{Handler: "firecracker"}}
	if err := env.Client.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "spec.handler") {
		t.Fatalf("an unknown handler was not refused by name: %v", err)
	}
	misnamed := &vmv1.ProviderClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Spec: vmv1.ProviderClassSpec{Handler: vmv1.ProviderQEMU}}
	if err := env.Client.Create(ctx, misnamed); err == nil || !strings.Contains(err.Error(), "named after its handler") {
		t.Fatalf("a class not named after its handler was not refused: %v", err)
	}
	pc := &vmv1.ProviderClass{ObjectMeta: metav1.ObjectMeta{Name: "qemu"}, Spec: vmv1.ProviderClassSpec{Handler: vmv1.ProviderQEMU}}
	if err := env.Client.Create(ctx, pc); err != nil {
		t.Fatal(err)
	}
	if pc.Spec.Enabled == nil || !*pc.Spec.Enabled {
		t.Fatalf("a new class is not enabled by default: %+v", pc.Spec)
	}
	pc.Spec.Handler = vmv1.ProviderCloudHypervisor
	if err := env.Client.Update(ctx, pc); err == nil || !strings.Contains(err.Error(), "spec.handler is immutable") {
		t.Fatalf("a handler change was not refused: %v", err)
	}
}

// TestAcceptsPodPlacement: the placement rules refuse only what a Pod would refuse.
func TestAcceptsPodPlacement(t *testing.T) {
	vm := kubeapi.SampleVM("default", "placed")
	vm.Spec.NodeSelector = map[string]string{"topology.kubernetes.io/zone": "zone-a", "gpu": ""}
	vm.Spec.Tolerations = []corev1.Toleration{
		{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](30)},
		{Operator: corev1.TolerationOpExists},
		{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "vms", Effect: corev1.TaintEffectNoSchedule},
		{Key: "dedicated", Value: "vms"},
	}
	vm.Spec.Guest.Ports = []vmv1.Port{{Name: "kube-apiserver", Port: 6443}}
	if err := env.Client.Create(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
}

// TestAcceptsPodResources: cpu and memory, requests and limits, are what podResources is for.
func TestAcceptsPodResources(t *testing.T) {
	vm := kubeapi.SampleVM("default", "sized")
	vm.Spec.PodResources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{"cpu": resource.MustParse("500m"), "memory": resource.MustParse("512Mi")},
		Limits:   corev1.ResourceList{"cpu": resource.MustParse("2"), "memory": resource.MustParse("1Gi")},
	}
	if err := env.Client.Create(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
}
