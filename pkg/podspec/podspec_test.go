package podspec_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/image/imagemap"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
	goldenfile "github.com/virtpod/virtpod/tests/golden"
)

func baseVM() *vmv1.VirtualMachine {
	return &vmv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web", UID: "0b5f6a43-1111-2222-3333-444455556666"},
		Spec: vmv1.VirtualMachineSpec{
			Provider:                      vmv1.ProviderQEMU,
			Acceleration:                  vmv1.AccelerationKVM,
			RunStrategy:                   vmv1.RunAlways,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Guest: vmv1.GuestSpec{
				CPUs:        2,
				Memory:      resource.MustParse("1Gi"),
				KernelImage: "registry.example.com/vm/kernel:6.1",
				RootDisk:    vmv1.RootDisk{Image: "registry.example.com/vm/debian:12"},
			},
		},
	}
}

func TestGolden(t *testing.T) {
	cases := map[string]func(*vmv1.VirtualMachine, *podspec.Options){
		"minimal-kvm": func(*vmv1.VirtualMachine, *podspec.Options) {},
		"copy-images-with-map": func(vm *vmv1.VirtualMachine, o *podspec.Options) {
			o.CopyImages = true
			o.ImageMap, _ = imagemap.Parse("virtpod/runner localhost/virtpod/runner:tilt-7\nregistry.example.com/vm/debian:12 localhost/vm/debian:dev\n")
		},
		"emulated-ports-disk": func(vm *vmv1.VirtualMachine, _ *podspec.Options) {
			vm.Spec.Acceleration = vmv1.AccelerationEmulated
			vm.Labels = map[string]string{"app": "web", podspec.LabelVMName: "spoofed"}
			vm.Spec.Guest.KernelArgs = "console=ttyS0 quiet"
			vm.Spec.Guest.RootDisk.Size = ptr.To(resource.MustParse("10Gi"))
			vm.Spec.Guest.RootDisk.Image = "registry.example.com/vm/debian:latest"
			vm.Spec.Guest.Ports = []vmv1.Port{{Name: "ssh", Port: 22, Protocol: corev1.ProtocolTCP}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}
			vm.Spec.RunnerImage = "localhost/virtpod/runner:dev"
		},
		"class-scheduling-and-overhead": func(vm *vmv1.VirtualMachine, o *podspec.Options) {
			vm.Spec.Tolerations = []corev1.Toleration{{Key: "user", Operator: corev1.TolerationOpExists}}
			o.Class = &vmv1.ProviderClass{Spec: vmv1.ProviderClassSpec{Handler: vmv1.ProviderQEMU,
				Scheduling: &vmv1.ProviderScheduling{NodeSelector: map[string]string{"pool": "vms", "disk": "ssd"},
					Tolerations: []corev1.Toleration{{Key: "vms-only", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}},
				Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")}}}
		},
		"class-runner-image": func(_ *vmv1.VirtualMachine, o *podspec.Options) {
			o.Class = &vmv1.ProviderClass{Spec: vmv1.ProviderClassSpec{Handler: vmv1.ProviderQEMU, RunnerImage: "registry.example.com/virtpod/runner:v2"}}
		},
		"cloud-init-seed": func(vm *vmv1.VirtualMachine, _ *podspec.Options) {
			vm.Spec.Guest.CloudInit = &vmv1.CloudInit{SecretRef: vmv1.SecretReference{Name: "web-bootstrap"}, UserDataKey: "value", NetworkDataKey: "network"}
		},
		"firmware-bios-default": func(vm *vmv1.VirtualMachine, _ *podspec.Options) {
			vm.Spec.Guest.KernelImage = ""
			vm.Spec.Guest.RootDisk.Image = "quay.io/containerdisks/debian:12"
		},
		"firmware-uefi-copy-images": func(vm *vmv1.VirtualMachine, o *podspec.Options) {
			vm.Spec.Guest.KernelImage, vm.Spec.Guest.Firmware = "", vmv1.FirmwareUEFI
			vm.Spec.Guest.ReadinessProbe = &vmv1.GuestProbe{HTTPGet: &vmv1.HTTPProbe{Port: 8080}}
			o.CopyImages = true
		},
		"resizable": func(vm *vmv1.VirtualMachine, _ *podspec.Options) {
			vm.Spec.Guest.CPUs, vm.Spec.Guest.Memory = 1, resource.MustParse("256Mi")
			vm.Spec.Guest.MaxCPUs, vm.Spec.Guest.MaxMemory = ptr.To[int32](4), ptr.To(resource.MustParse("1Gi"))
		},
		"display-none": func(vm *vmv1.VirtualMachine, _ *podspec.Options) {
			vm.Spec.Guest.Display = vmv1.DisplayNone
		},
		"readiness-probe-tcp": func(vm *vmv1.VirtualMachine, _ *podspec.Options) {
			vm.Spec.Guest.ReadinessProbe = &vmv1.GuestProbe{TCPSocket: &vmv1.TCPProbe{Port: 22}}
		},
		"user-affinity-and-resources": func(vm *vmv1.VirtualMachine, _ *podspec.Options) {
			vm.Spec.NodeSelector = map[string]string{"pool": "vms"}
			vm.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "vms", Effect: corev1.TaintEffectNoSchedule}}
			vm.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
					{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
					{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}}},
					{},
				}},
			}}
			vm.Spec.PodResources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			vm, opts := baseVM(), podspec.DefaultOptions()
			mutate(vm, &opts)
			pod := podspec.Build(vm, opts)
			if got, want := podspec.PodImages(pod), podspec.Images(vm, opts); got != want {
				t.Errorf("the pod's images %+v are not the VM's effective images %+v", got, want)
			}
			got, err := yaml.Marshal(pod)
			if err != nil {
				t.Fatal(err)
			}
			goldenfile.Check(t, name+".golden.yaml", got)
		})
	}
}

// TestAffinityTightensEveryTerm: virtpod's node requirements go into every required term (terms
// are ORed), never as a term of their own, and an empty term (matches nothing) stays empty.
func TestAffinityTightensEveryTerm(t *testing.T) {
	vm := baseVM()
	vm.Spec.Affinity = &corev1.Affinity{
		NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}},
			{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}},
			{},
		}}},
		PodAntiAffinity: &corev1.PodAntiAffinity{},
	}
	before := vm.Spec.Affinity.DeepCopy()
	terms := podspec.Build(vm, podspec.DefaultOptions()).Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 3 {
		t.Fatalf("%d terms, want the user's 3", len(terms))
	}
	for i, want := range []int{5, 4, 0} {
		if got := len(terms[i].MatchExpressions); got != want {
			t.Errorf("term %d has %d expressions, want %d: %+v", i, got, want, terms[i])
		}
	}
	if terms[0].MatchExpressions[0].Key != "zone" || terms[1].MatchFields[0].Values[0] != "n1" {
		t.Errorf("user requirements lost: %+v", terms)
	}
	if !equalAffinity(before, vm.Spec.Affinity) {
		t.Error("Build modified the VM's affinity")
	}
}

func equalAffinity(a, b *corev1.Affinity) bool {
	x, _ := yaml.Marshal(a)
	y, _ := yaml.Marshal(b)
	return string(x) == string(y)
}

func TestNeverPrivilegedAndKVMOnlyByDevicePlugin(t *testing.T) {
	for _, accel := range []vmv1.Acceleration{vmv1.AccelerationKVM, vmv1.AccelerationEmulated} {
		vm := baseVM()
		vm.Spec.Acceleration = accel
		pod := podspec.Build(vm, podspec.DefaultOptions())
		c := pod.Spec.Containers[0]
		if c.SecurityContext.Privileged == nil || *c.SecurityContext.Privileged || *c.SecurityContext.AllowPrivilegeEscalation {
			t.Fatalf("%s: runner may be privileged", accel)
		}
		for _, v := range pod.Spec.Volumes {
			if v.HostPath != nil {
				t.Fatalf("%s: hostPath volume %s", accel, v.Name)
			}
		}
		_, hasKVM := c.Resources.Limits[vmv1.ResourceKVM]
		if hasKVM != (accel == vmv1.AccelerationKVM) {
			t.Fatalf("%s: kvm device requested = %v", accel, hasKVM)
		}
	}
}

// TestRunnerConfigRoundTrip: what the controller renders, the runner reads back unchanged.
func TestRunnerConfigRoundTrip(t *testing.T) {
	vm := baseVM()
	vm.Spec.Guest.KernelArgs = "console=ttyS0 --port=evil:1/TCP"
	vm.Spec.Guest.Ports = []vmv1.Port{{Name: "ssh", Port: 22}}
	want := podspec.RunnerConfig(vm)
	got, err := runnerconfigtest.Parse(podspec.Build(vm, podspec.DefaultOptions()).Spec.Containers[0].Args)
	if err != nil {
		t.Fatal(err)
	}
	if got.KernelArgs != want.KernelArgs || len(got.Ports) != 1 || got.MemoryMiB != 1024 || got.Acceleration != "kvm" {
		t.Fatalf("round trip changed the config:\n got %+v\nwant %+v", got, want)
	}

	// A cloud-init seed: the runner is told the VM's UID and the mounted files' paths.
	vm.Spec.Guest.CloudInit = &vmv1.CloudInit{SecretRef: vmv1.SecretReference{Name: "boot"}}
	pod := podspec.Build(vm, podspec.DefaultOptions())
	got, err = runnerconfigtest.Parse(pod.Spec.Containers[0].Args)
	if err != nil {
		t.Fatal(err)
	}
	if got.InstanceID != string(vm.UID) || got.CloudInitUserData != "/virtpod/cloud-init/user-data" || got.CloudInitNetworkData != "" {
		t.Fatalf("seed flags: %+v", got)
	}
	var secret *corev1.SecretVolumeSource
	for _, v := range pod.Spec.Volumes {
		if v.Name == podspec.CloudInitVolume {
			secret = v.Secret
		}
	}
	if secret == nil || secret.SecretName != "boot" || len(secret.Items) != 1 || secret.Items[0].Key != vmv1.DefaultUserDataKey ||
		secret.Items[0].Path != "user-data" || *secret.DefaultMode != 0o400 {
		t.Fatalf("cloud-init secret volume: %+v", secret)
	}
}

// TestGuestProbeWords: the words the VM's Ready condition uses for the probe a pod was built with.
func TestGuestProbeWords(t *testing.T) {
	for _, tc := range []struct {
		probe *vmv1.GuestProbe
		want  string
	}{
		{nil, ""},
		{&vmv1.GuestProbe{TCPSocket: &vmv1.TCPProbe{Port: 22}}, "TCP port 22"},
		{&vmv1.GuestProbe{HTTPGet: &vmv1.HTTPProbe{Port: 8080}}, "HTTP GET of / on port 8080"},
		{&vmv1.GuestProbe{HTTPGet: &vmv1.HTTPProbe{Port: 80, Path: "/healthz?full=1"}}, "HTTP GET of /healthz?full=1 on port 80"},
	} {
		vm := baseVM()
		vm.Spec.Guest.ReadinessProbe = tc.probe
		if got := podspec.GuestProbe(podspec.Build(vm, podspec.DefaultOptions())); got != tc.want {
			t.Errorf("probe %+v: %q, want %q", tc.probe, got, tc.want)
		}
	}
}

// TestResourcesAllocationRatio: a pod requests cpus/ratio (rounded up) plus the overheads and is
// limited to the full cpus plus the overheads, at least cpuLimitMargin (250m) above the cpus;
// memory is the guest's plus 64Mi and the display's 16Mi, and an emulated VM's adds the TCG
// cache bound.
func TestResourcesAllocationRatio(t *testing.T) {
	cases := []struct {
		name                        string
		cpus                        int32
		ratio                       int
		overhead, classCPU          string
		wantReq, wantLimit, wantMem string
	}{
		{"KubeVirt's default ratio", 1, 10, "50m", "", "150m", "1250m", "1104Mi"},
		{"ratio 1 reserves whole CPUs", 2, 1, "50m", "", "2050m", "2250m", "1104Mi"},
		{"unset ratio counts as 1", 1, 0, "50m", "", "1050m", "1250m", "1104Mi"},
		{"rounded up", 1, 3, "0", "", "334m", "1250m", "1104Mi"},
		{"overhead above the margin", 4, 10, "300m", "", "700m", "4300m", "1104Mi"},
		{"class overhead on both", 1, 10, "50m", "250m", "400m", "1300m", "1104Mi"},
	}
	emulated := []struct{ guest, want string }{
		{"256Mi", "368Mi"}, // + 64Mi + 16Mi of video memory + a 32 MiB translation cache
		{"1Gi", "1232Mi"},  // + 64Mi + 16Mi + 128 MiB
	}
	for _, c := range emulated {
		vm := baseVM()
		vm.Spec.Acceleration, vm.Spec.Guest.Memory = vmv1.AccelerationEmulated, resource.MustParse(c.guest)
		r := podspec.Build(vm, podspec.DefaultOptions()).Spec.Containers[0].Resources
		if got := r.Limits.Memory(); got.Cmp(resource.MustParse(c.want)) != 0 {
			t.Errorf("emulated %s guest: memory limit %s, want %s", c.guest, got, c.want)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vm, opts := baseVM(), podspec.DefaultOptions()
			vm.Spec.Guest.CPUs = c.cpus
			opts.CPUAllocationRatio, opts.OverheadCPU = c.ratio, resource.MustParse(c.overhead)
			if c.classCPU != "" {
				opts.Class = &vmv1.ProviderClass{Spec: vmv1.ProviderClassSpec{Handler: vmv1.ProviderQEMU,
					Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(c.classCPU)}}}
			}
			r := podspec.Build(vm, opts).Spec.Containers[0].Resources
			if got := r.Requests.Cpu(); got.Cmp(resource.MustParse(c.wantReq)) != 0 {
				t.Errorf("cpu request %s, want %s", got, c.wantReq)
			}
			if got := r.Limits.Cpu(); got.Cmp(resource.MustParse(c.wantLimit)) != 0 {
				t.Errorf("cpu limit %s, want %s", got, c.wantLimit)
			}
			if got := r.Limits.Memory(); got.Cmp(resource.MustParse(c.wantMem)) != 0 || r.Requests.Memory().Cmp(*got) != 0 {
				t.Errorf("memory request %s limit %s, want both %s", r.Requests.Memory(), got, c.wantMem)
			}
		})
	}
}

// TestMachinePinnedFromStatus: a QEMU guest's runner gets the machine it first ran with; before
// that, and for cloud-hypervisor, none (QEMU's q35).
func TestMachinePinnedFromStatus(t *testing.T) {
	vm := baseVM()
	if c := podspec.RunnerConfig(vm); c.Machine != "" {
		t.Errorf("before the first start: machine %q", c.Machine)
	}
	vm.Status.Machine = "pc-q35-7.2"
	if c := podspec.RunnerConfig(vm); c.Machine != "pc-q35-7.2" || !slices.Contains(c.Args(), "--machine=pc-q35-7.2") {
		t.Errorf("pinned: machine %q, args %q", c.Machine, c.Args())
	}
	vm.Spec.Provider = vmv1.ProviderCloudHypervisor
	if c := podspec.RunnerConfig(vm); c.Machine != "" {
		t.Errorf("cloud-hypervisor: machine %q", c.Machine)
	}
}
