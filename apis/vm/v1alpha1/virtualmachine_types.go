package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Provider names a hypervisor.
// +kubebuilder:validation:Enum=qemu;cloud-hypervisor
type Provider string

// Hypervisor providers.
const (
	ProviderQEMU            Provider = "qemu"
	ProviderCloudHypervisor Provider = "cloud-hypervisor"
)

// Acceleration says how guest code runs.
// +kubebuilder:validation:Enum=KVM;Emulated
type Acceleration string

// Accelerations.
const (
	// AccelerationKVM runs the guest with hardware virtualisation through /dev/kvm.
	AccelerationKVM Acceleration = "KVM"
	// AccelerationEmulated runs the guest under software emulation (QEMU TCG), many times slower.
	AccelerationEmulated Acceleration = "Emulated"
)

// RunStrategy is the VM's desired power state: whether a guest should run, and whether a run
// that ended is followed by a new one. The names are KubeVirt's.
// +kubebuilder:validation:Enum=Always;RerunOnFailure;Once;Manual;Halted
type RunStrategy string

// Run strategies.
const (
	// RunAlways keeps the guest running: a new run follows whatever ended the last one.
	RunAlways RunStrategy = "Always"
	// RunRerunOnFailure starts a new run only after a failure; a clean power-off ends in
	// phase Succeeded.
	RunRerunOnFailure RunStrategy = "RerunOnFailure"
	// RunOnce runs the guest once; a run that ends stays ended.
	RunOnce RunStrategy = "Once"
	// RunManual starts a run when the VM is created and when the user asks (runRequestedAt);
	// the controller never starts one by itself, and a run that ends stays ended.
	RunManual RunStrategy = "Manual"
	// RunHalted wants no guest: the runner pod is deleted, its grace period giving the guest
	// its ACPI power-down, and none is made until the strategy changes.
	RunHalted RunStrategy = "Halted"
)

// EffectiveRunStrategy is runStrategy as the CRD defaults it: Always when empty (an object
// read from before the default, or built in Go without it).
func (s *VirtualMachineSpec) EffectiveRunStrategy() RunStrategy {
	if s.RunStrategy == "" {
		return RunAlways
	}
	return s.RunStrategy
}

// RunnerFeaturesNeeded lists what the VM needs of its runner image beyond booting a guest.
func (s *VirtualMachineSpec) RunnerFeaturesNeeded() []RunnerFeature {
	var need []RunnerFeature
	if len(s.Guest.Filesystems) > 0 {
		need = append(need, RunnerFeatureVirtioFS)
	}
	return need
}

// Halted says whether the VM wants no guest (runStrategy Halted).
func (s *VirtualMachineSpec) Halted() bool { return s.RunStrategy == RunHalted }

// VirtualMachineSpec is the desired virtual machine.
// +kubebuilder:validation:XValidation:rule="!has(self.suspend) || !self.suspend || has(self.guest.stateClaim)",message="spec.suspend needs spec.guest.stateClaim: name a Filesystem claim of at least the guest's memory plus 64Mi to keep its state (the runner pod mounts it from its next start), or set suspend false",fieldPath=".suspend"
// +kubebuilder:validation:XValidation:rule="!has(self.guest.stateClaim) || !has(self.provider) || self.provider == 'qemu'",message="spec.guest.stateClaim is for provider qemu: cloud-hypervisor guests cannot be suspended; remove stateClaim",fieldPath=".guest.stateClaim"
// +kubebuilder:validation:XValidation:rule="!has(self.guest.filesystems) || size(self.guest.filesystems) == 0 || !has(self.provider) || self.provider == 'qemu'",message="spec.guest.filesystems is for provider qemu: virtpod runs no virtiofsd for cloud-hypervisor yet; remove filesystems or use provider qemu",fieldPath=".guest.filesystems"
// +kubebuilder:validation:XValidation:rule="!has(self.guest.display) || self.guest.display != 'VNC' || !has(self.provider) || self.provider == 'qemu'",message="spec.guest.display VNC is for provider qemu: cloud-hypervisor has no VNC server; use display None or leave it empty",fieldPath=".guest.display"
// +kubebuilder:validation:XValidation:rule="!has(self.provider) || self.provider != 'cloud-hypervisor' || self.acceleration == 'KVM'",message="spec.acceleration: cloud-hypervisor has no software emulation; use acceleration KVM or provider qemu"
type VirtualMachineSpec struct {
	// provider is the hypervisor that runs the guest: qemu or cloud-hypervisor, offered by the
	// ProviderClass of that name. A VM gets the provider it asks for or a clear failure, never
	// another one. Left empty, the controller writes in the default class's provider once, so a
	// later change of the default never moves the VM. Immutable once set.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.provider is immutable; create a new VirtualMachine to change the hypervisor"
	// +optional
	Provider Provider `json:"provider,omitempty"`

	// acceleration is KVM (hardware virtualisation, the default) or Emulated (software
	// emulation, many times slower, only when asked for explicitly). Immutable.
	// +kubebuilder:default=KVM
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.acceleration is immutable; create a new VirtualMachine to change it"
	// +optional
	Acceleration Acceleration `json:"acceleration,omitempty"`

	// guest describes the virtual hardware and what it boots.
	Guest GuestSpec `json:"guest"`

	// runnerImage is the image of the runner container that runs the hypervisor. Empty means the
	// ProviderClass's runnerImage, or else the controller's default (its --runner-image flag). The
	// runner holds NET_ADMIN and /dev/kvm, so a VM may name an image only when its ProviderClass
	// allows it (spec.allowedRunnerImages); anything else is refused at admission.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$')",message="spec.runnerImage must be an image reference such as registry.example.com/virtpod/runner:v1"
	// +optional
	RunnerImage string `json:"runnerImage,omitempty"`

	// runStrategy is the desired power state. Always (the default) keeps the guest running,
	// starting a new run whatever ended the last; RerunOnFailure starts a new run only after a
	// failure; Once runs it once; Manual starts a run only when the VM is created and when
	// runRequestedAt asks; Halted powers the guest down cleanly and keeps it off (phase
	// Stopped), keeping the VM and its spec.
	// +kubebuilder:default=Always
	// +optional
	RunStrategy RunStrategy `json:"runStrategy,omitempty"`

	// suspend parks the running guest: its state (memory and devices) is saved on
	// spec.guest.stateClaim and its runner pod removed, so it holds no CPU or memory (phase
	// Suspended). false (the default) again starts a runner that loads the state: the guest
	// continues where it stopped, its processes and its address unchanged. While true, no guest
	// is started. `vmctl suspend` and `vmctl resume` set it. A run request (runRequestedAt)
	// later than the saved state discards it: the guest boots afresh.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// runRequestedAt asks for a new run: a guest whose run started before this time is powered
	// down cleanly and booted in a new runner pod, and a run that ended gets a new one. Each
	// time is honoured once (status.lastRunRequest); set a later time to ask again. Ignored
	// while runStrategy is Halted. `vmctl restart` and `vmctl start` set it.
	// +optional
	RunRequestedAt *metav1.Time `json:"runRequestedAt,omitempty"`

	// terminationGracePeriodSeconds is how long the guest gets to shut down cleanly after an
	// ACPI power-down request before the hypervisor is stopped.
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	// +optional
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`

	// nodeSelector restricts the nodes the runner pod may run on, as in a Pod.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",message="spec.nodeSelector keys must be label keys such as topology.kubernetes.io/zone: an optional DNS-subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric"
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// affinity is the runner pod's affinity, as in a Pod. virtpod adds its own node requirements
	// to every required node-selector term, so they tighten, never loosen, what is given here.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// tolerations of the runner pod, as in a Pod.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.operator) || t.operator in ['Exists', 'Equal'])",message="spec.tolerations[].operator must be Exists or Equal"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.effect) || t.effect in ['', 'NoSchedule', 'PreferNoSchedule', 'NoExecute'])",message="spec.tolerations[].effect must be NoSchedule, PreferNoSchedule or NoExecute (or empty for all)"
	// +kubebuilder:validation:XValidation:rule="self.all(t, (has(t.key) && t.key != '') || (has(t.operator) && t.operator == 'Exists'))",message="spec.tolerations[]: a toleration without a key must have operator Exists"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.operator) || t.operator != 'Exists' || !has(t.value) || t.value == '')",message="spec.tolerations[]: operator Exists takes no value; remove it or use operator Equal"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.tolerationSeconds) || (has(t.effect) && t.effect == 'NoExecute'))",message="spec.tolerations[].tolerationSeconds needs effect NoExecute"
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// imageUpdatePolicy says when new images reach a running guest, whether they come from a
	// spec change or from the controller's image map: OnRestart (the default) uses them at the
	// guest's next start; Recreate replaces the runner pod now, shutting the guest down cleanly
	// and booting it from the new images, and is meant for development loops; LiveMigrate moves
	// a running guest onto a new runner image (an upgrade of virtpod, or the VM's own) by a live
	// migration, without a reboot, while the guest is Migratable; a new kernel or root-disk
	// image still waits for the next start.
	// +kubebuilder:default=OnRestart
	// +optional
	ImageUpdatePolicy ImageUpdatePolicy `json:"imageUpdatePolicy,omitempty"`

	// podResources overrides the runner container's resources, which are otherwise derived from
	// guest.cpus and guest.memory plus a fixed runner overhead. Only cpu and memory: the
	// devices a runner needs come from its provider, and other extended resources (GPUs, the
	// node agent's own devices) are an admin's to hand out, not a VM's.
	// +kubebuilder:validation:XValidation:rule="(!has(self.limits) || self.limits.all(k, k == 'cpu' || k == 'memory')) && (!has(self.requests) || self.requests.all(k, k == 'cpu' || k == 'memory'))",message="spec.podResources may set only cpu and memory requests and limits (devices come from the VM's provider); remove the other resources"
	// +kubebuilder:validation:XValidation:rule="!has(self.claims)",message="spec.podResources.claims: a runner pod takes no resource claims; remove them"
	// +optional
	PodResources *corev1.ResourceRequirements `json:"podResources,omitempty"`

	// evictionStrategy says what a node drain does to the running guest: None (the default)
	// lets the drain stop it (it restarts elsewhere per runStrategy); LiveMigrate moves it to
	// another node without a reboot: the controller keeps a PodDisruptionBudget that holds the
	// drain's evictions and migrates the VM off a cordoned node. The VM must be migratable (its
	// Migratable condition says so).
	// +optional
	EvictionStrategy EvictionStrategy `json:"evictionStrategy,omitempty"`
}

// EvictionStrategy is what a node drain does to a running guest.
// +kubebuilder:validation:Enum=None;LiveMigrate
type EvictionStrategy string

// Eviction strategies.
const (
	EvictionNone        EvictionStrategy = "None"
	EvictionLiveMigrate EvictionStrategy = "LiveMigrate"
)

// GuestSpec is the guest's virtual hardware and boot images.
// +kubebuilder:validation:XValidation:rule="has(self.kernelImage) || !has(self.kernelArgs) || size(self.kernelArgs) == 0",message="spec.guest.kernelArgs needs spec.guest.kernelImage: a guest that boots through firmware takes its kernel command line from its own bootloader; set kernelImage or remove kernelArgs",fieldPath=".kernelArgs"
// +kubebuilder:validation:XValidation:rule="!has(self.kernelImage) || !has(self.firmware)",message="spec.guest.firmware is only for a guest without spec.guest.kernelImage (a direct kernel boot needs no firmware); remove one of them",fieldPath=".firmware"
// +kubebuilder:validation:XValidation:rule="!has(self.maxCPUs) || self.cpus <= self.maxCPUs",message="spec.guest.cpus must not be above spec.guest.maxCPUs: lower cpus, or create a new VirtualMachine with a larger maxCPUs",fieldPath=".cpus"
// +kubebuilder:validation:XValidation:rule="!has(self.maxMemory) || quantity(string(self.memory)).compareTo(quantity(string(self.maxMemory))) <= 0",message="spec.guest.memory must not be above spec.guest.maxMemory: lower memory, or create a new VirtualMachine with a larger maxMemory",fieldPath=".memory"
// +kubebuilder:validation:XValidation:rule="!has(self.maxMemory) || quantity(string(self.memory)).compareTo(quantity(string(self.maxMemory))) == 0 || (quantity(string(self.memory)).isInteger() && quantity(string(self.memory)).asInteger() % 134217728 == 0 && quantity(string(self.maxMemory)).isInteger() && quantity(string(self.maxMemory)).asInteger() % 134217728 == 0)",message="spec.guest.memory and spec.guest.maxMemory must be multiples of 128Mi (the memory hotplug block) when maxMemory is above memory, for example memory 768Mi and maxMemory 2Gi",fieldPath=".memory"
// +kubebuilder:validation:XValidation:rule="has(self.maxCPUs) == has(oldSelf.maxCPUs) && (!has(self.maxCPUs) || self.maxCPUs == oldSelf.maxCPUs)",message="spec.guest.maxCPUs is immutable (the hypervisor starts with it); create a new VirtualMachine to change it",fieldPath=".maxCPUs"
// +kubebuilder:validation:XValidation:rule="has(self.maxMemory) == has(oldSelf.maxMemory) && (!has(self.maxMemory) || quantity(string(self.maxMemory)).compareTo(quantity(string(oldSelf.maxMemory))) == 0)",message="spec.guest.maxMemory is immutable (the hypervisor starts with it); create a new VirtualMachine to change it",fieldPath=".maxMemory"
// +kubebuilder:validation:XValidation:rule="has(self.maxCPUs) || self.cpus == oldSelf.cpus",message="spec.guest.cpus is immutable on a VirtualMachine created without spec.guest.maxCPUs; create a new VirtualMachine with maxCPUs to resize it live",fieldPath=".cpus"
// +kubebuilder:validation:XValidation:rule="has(self.maxMemory) || quantity(string(self.memory)).compareTo(quantity(string(oldSelf.memory))) == 0",message="spec.guest.memory is immutable on a VirtualMachine created without spec.guest.maxMemory; create a new VirtualMachine with maxMemory to resize it live",fieldPath=".memory"
// +kubebuilder:validation:XValidation:rule="!has(self.stateClaim) || has(self.rootDisk.persistentVolumeClaim)",message="spec.guest.stateClaim needs the root disk on a claim (spec.guest.rootDisk.persistentVolumeClaim): a saved state matches only disks that outlive the runner pod, and an image's overlay does not",fieldPath=".stateClaim"
// +kubebuilder:validation:XValidation:rule="!has(self.stateClaim) || (has(self.networkMode) && self.networkMode == 'Masquerade')",message="spec.guest.stateClaim needs spec.guest.networkMode Masquerade: a resumed guest keeps its address, and in the Pod mode it owns the pod IP, which a new runner pod does not have",fieldPath=".stateClaim"
// +kubebuilder:validation:XValidation:rule="!has(self.stateClaim) || !has(self.disks) || self.disks.all(d, !has(d.emptyDisk))",message="spec.guest.stateClaim cannot go with an emptyDisk: it is blank at every start, so a saved state would not match it; put that disk on a claim, or remove stateClaim",fieldPath=".stateClaim"
// +kubebuilder:validation:XValidation:rule="!has(self.stateClaim) || ((!has(self.rootDisk.persistentVolumeClaim) || self.rootDisk.persistentVolumeClaim.claimName != self.stateClaim.claimName) && (!has(self.disks) || self.disks.all(d, !has(d.persistentVolumeClaim) || d.persistentVolumeClaim.claimName != self.stateClaim.claimName)))",message="spec.guest.stateClaim.claimName names a claim a disk uses: the state needs a claim of its own",fieldPath=".stateClaim.claimName"
// +kubebuilder:validation:XValidation:rule="!has(self.stateClaim) || !has(self.filesystems) || size(self.filesystems) == 0",message="spec.guest.stateClaim cannot go with spec.guest.filesystems: QEMU cannot save a guest whose files a virtiofsd holds open; remove the filesystems or the stateClaim",fieldPath=".stateClaim"
type GuestSpec struct {
	// cpus is the number of virtual CPUs, 1-255. It changes on a running guest (live, without a
	// restart: CPUs are plugged and unplugged) between 1 and maxCPUs; without maxCPUs it is
	// immutable.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=255
	CPUs int32 `json:"cpus"`

	// memory is the guest's RAM, at least 64Mi and at most 1Ti. It changes on a running guest
	// (live) up to maxMemory, in multiples of 128Mi (MemoryHotplugBlock); a shrink takes back
	// only what the guest gives. Without maxMemory it is immutable.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('64Mi')) >= 0 && quantity(string(self)).compareTo(quantity('1Ti')) <= 0",message="spec.guest.memory must be between 64Mi and 1Ti, for example 512Mi"
	Memory resource.Quantity `json:"memory"`

	// maxCPUs is the most CPUs cpus may grow to on the running guest, 1-255. Set it at creation
	// to resize the VM live; empty means cpus, fixed. Immutable. The runner pod requests only
	// what the guest uses now (cpus), never the maximum.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=255
	// +optional
	MaxCPUs *int32 `json:"maxCPUs,omitempty"`

	// maxMemory is the most memory may grow to on the running guest, up to 1Ti. Set it at
	// creation to resize the VM live; empty means memory, fixed. Immutable. Above memory, both
	// must be multiples of 128Mi.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('64Mi')) >= 0 && quantity(string(self)).compareTo(quantity('1Ti')) <= 0",message="spec.guest.maxMemory must be between 64Mi and 1Ti, for example 4Gi"
	// +optional
	MaxMemory *resource.Quantity `json:"maxMemory,omitempty"`

	// kernelImage is an OCI image that carries the guest kernel at /boot/vmlinuz and, optionally,
	// an initramfs at /boot/initrd.img, booted directly. Without it the guest boots from its root
	// disk's own bootloader through firmware (see firmware), as a cloud image does. A change
	// applies at the guest's next start.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$')",message="spec.guest.kernelImage must be an image reference such as registry.example.com/vm/kernel:6.1"
	// +optional
	KernelImage string `json:"kernelImage,omitempty"`

	// firmware a guest without kernelImage boots through: BIOS (SeaBIOS, used when empty) or
	// UEFI (OVMF with secure boot off, its variable store a per-pod copy). The root disk must
	// carry a bootloader for it (a BIOS boot sector, or an EFI system partition). A change
	// applies at the guest's next start.
	// +optional
	Firmware Firmware `json:"firmware,omitempty"`

	// display is the guest's screen: VNC (used when empty) gives it a standard VGA card, which
	// `vmctl vnc` reaches over VNC and `vmctl screenshot` captures, both through the runner pod's
	// exec (nothing listens on the network); None gives it no graphics card. The runner pod's
	// memory grows by the card's 16Mi of video memory. Provider qemu only: a cloud-hypervisor
	// guest has no display. A change applies at the guest's next start.
	// +optional
	Display Display `json:"display,omitempty"`

	// kernelArgs is appended to the guest kernel's command line. Only with kernelImage.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\n')",message="spec.guest.kernelArgs must be a single line"
	// +optional
	KernelArgs string `json:"kernelArgs,omitempty"`

	// readinessProbe is checked against the guest, as a container's readiness probe is: the VM
	// is Ready only while it passes. Without it, Ready means the guest is running.
	// +optional
	ReadinessProbe *GuestProbe `json:"readinessProbe,omitempty"`

	// rootDisk is the guest's root disk.
	RootDisk RootDisk `json:"rootDisk"`

	// ports are the guest ports published at the VM's pod IP, for Services to select.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Ports []Port `json:"ports,omitempty"`

	// networkMode is how the guest reaches the pod's network: Pod (the default) gives it the
	// pod's own interface and IP; Masquerade gives it a fixed address inside the pod behind the
	// runner's NAT of the pod IP (the spec's ports forwarded), which survives a live migration.
	// A change applies at the guest's next start.
	// +optional
	NetworkMode NetworkMode `json:"networkMode,omitempty"`

	// disks are the guest's data disks, attached after the root disk (and the cloud-init seed)
	// in this order, each found in the guest at /dev/disk/by-id/virtio-<name> (docs/storage.md).
	// A change applies at the guest's next start.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(d, self.exists_one(e, e.name == d.name))",message="spec.guest.disks: each disk needs a unique name (it is the disk's serial); rename the duplicate"
	// +kubebuilder:validation:XValidation:rule="self.filter(d, has(d.hotplug) && d.hotplug).size() <= 4",message="spec.guest.disks: at most 4 disks may have hotplug: true (the guest has 4 hotplug slots); drop hotplug from the others"
	// +optional
	Disks []Disk `json:"disks,omitempty"`

	// filesystems are directories of the runner pod shared live into the guest through
	// virtio-fs, each mounted in the guest by its name (docs/filesystems.md). A change applies
	// at the guest's next start; what changes inside a ConfigMap, a Secret or the directory
	// shows in the running guest.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="self.all(f, self.exists_one(e, e.name == f.name))",message="spec.guest.filesystems: each filesystem needs a unique name (it is the tag the guest mounts); rename the duplicate"
	// +optional
	Filesystems []Filesystem `json:"filesystems,omitempty"`

	// stateClaim is where the guest's state is saved when it is suspended (spec.suspend): a
	// Filesystem claim of its own. Only for provider qemu, with the root disk on a claim and no
	// emptyDisk (every writable disk must outlive the pod, or the state would not match it), in
	// the Masquerade network mode (the resumed guest keeps its address).
	// The runner pod mounts it from its start: a change applies at the guest's next start.
	// +optional
	StateClaim *StateClaim `json:"stateClaim,omitempty"`

	// cloudInit gives the guest a cloud-init NoCloud seed disk built from a Secret, so bootstrap
	// data (such as a Cluster API Machine's) reaches the guest without appearing in any spec,
	// argument or environment variable. A change applies at the guest's next start.
	// +optional
	CloudInit *CloudInit `json:"cloudInit,omitempty"`
}

// Firmware is what a guest without a kernel image boots through.
// +kubebuilder:validation:Enum=BIOS;UEFI
type Firmware string

// Firmwares.
const (
	FirmwareBIOS Firmware = "BIOS" // SeaBIOS
	FirmwareUEFI Firmware = "UEFI" // OVMF, secure boot off
)

// GuestProbe checks that the guest serves: a TCP connection to a guest port, or an HTTP GET
// answered 2xx or 3xx. The runner probes the guest every 2 seconds with a 1-second timeout.
// +kubebuilder:validation:XValidation:rule="has(self.tcpSocket) != has(self.httpGet)",message="spec.guest.readinessProbe needs exactly one of tcpSocket or httpGet"
type GuestProbe struct {
	// tcpSocket passes when the guest accepts a TCP connection on port.
	// +optional
	TCPSocket *TCPProbe `json:"tcpSocket,omitempty"`
	// httpGet passes when the guest answers an HTTP GET of path on port with 2xx or 3xx.
	// +optional
	HTTPGet *HTTPProbe `json:"httpGet,omitempty"`
}

// TCPProbe is a TCP connection to a guest port.
type TCPProbe struct {
	// port is the guest's port, 1-65535.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// HTTPProbe is an HTTP GET of a guest port.
type HTTPProbe struct {
	// port is the guest's port, 1-65535.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// path is the request's absolute path; / when empty.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.matches('^/[!-~]*$')",message="spec.guest.readinessProbe.httpGet.path must be an absolute path such as /healthz: '/' then printable characters without spaces"
	// +optional
	Path string `json:"path,omitempty"`
}

// CloudInit is a cloud-init NoCloud seed taken from a Secret in the VM's namespace. The runner
// attaches it to the guest as a read-only disk labelled cidata, after the root disk, with
// user-data, meta-data (instance-id: the VM's UID, local-hostname: the VM's name) and, when
// networkDataKey is set, network-config.
// +kubebuilder:validation:XValidation:rule="!has(self.networkDataKey) || self.networkDataKey != (has(self.userDataKey) ? self.userDataKey : 'value')",message="spec.guest.cloudInit.networkDataKey must name a different Secret key than userDataKey",fieldPath=".networkDataKey"
type CloudInit struct {
	// secretRef names the Secret, in the VM's namespace, that holds the data. virtpod never reads
	// it: the kubelet mounts it into the runner pod, and a missing Secret or key keeps the pod
	// from starting (the pod's FailedMount event names it).
	SecretRef SecretReference `json:"secretRef"`

	// userDataKey is the Secret key holding the user-data. The default, value, is the key
	// Cluster API bootstrap Secrets use.
	// +kubebuilder:default=value
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$') && self != '.' && !self.startsWith('..')",message="spec.guest.cloudInit.userDataKey must be a Secret key such as value: letters, digits, '-', '_' and '.', not starting with '..'"
	// +optional
	UserDataKey string `json:"userDataKey,omitempty"`

	// networkDataKey is the Secret key holding a cloud-init network configuration, written to
	// the seed as network-config. Empty: no network-config, and the guest configures its
	// network as it would anyway: by DHCP, which the runner answers with the pod's address,
	// routes and DNS (a kernel boot also gets the pod IP on its kernel command line).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$') && self != '.' && !self.startsWith('..')",message="spec.guest.cloudInit.networkDataKey must be a Secret key such as network-config: letters, digits, '-', '_' and '.', not starting with '..'"
	// +optional
	NetworkDataKey string `json:"networkDataKey,omitempty"`
}

// DefaultUserDataKey is userDataKey's default: the key Cluster API bootstrap Secrets keep their
// data in. The +kubebuilder:default marker above repeats it (markers cannot name constants).
const DefaultUserDataKey = "value"

// SecretReference names a Secret in the same namespace.
type SecretReference struct {
	// name of the Secret: a DNS subdomain, such as bootstrap-data.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="spec.guest.cloudInit.secretRef.name must be a Secret name (a DNS subdomain) such as bootstrap-data: lower-case letters, digits, '-' and '.'"
	Name string `json:"name"`
}

// RootDisk is the guest's root disk: a read-only base image with a writable overlay that lives
// as long as the runner pod, or a disk kept on a PersistentVolumeClaim (populated once from the
// image when both are given).
// +kubebuilder:validation:XValidation:rule="has(self.size) == has(oldSelf.size) && (!has(self.size) || self.size == oldSelf.size)",message="spec.guest.rootDisk.size is immutable; create a new VirtualMachine for a different disk size"
// +kubebuilder:validation:XValidation:rule="has(self.image) || has(self.persistentVolumeClaim)",message="spec.guest.rootDisk: give an image, a persistentVolumeClaim, or both (the image then fills the claim once, on first boot)"
type RootDisk struct {
	// image is an OCI image that carries the disk, raw or qcow2, at /disk/root.img or as the one
	// .qcow2, .img or .raw file under /disk/ (KubeVirt's containerDisk layout, so published
	// containerDisk images work unchanged). Alone, the guest writes to a copy-on-write overlay
	// that lives as long as the runner pod; the image is never modified. With
	// persistentVolumeClaim, it is copied into the claim once, on the first boot, and never
	// again. A change applies at the guest's next start.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$')",message="spec.guest.rootDisk.image must be an image reference such as registry.example.com/vm/disk:v1"
	// +optional
	Image string `json:"image,omitempty"`

	// persistentVolumeClaim keeps the root disk on a PVC in the VM's namespace, so it outlives
	// runner pods and the VM itself (deleting the VM leaves the claim). The guest boots from it
	// directly, with no overlay.
	// +optional
	PersistentVolumeClaim *RootDiskClaim `json:"persistentVolumeClaim,omitempty"`

	// size of the writable disk the guest sees, at least 64Mi and no smaller than the image.
	// Empty keeps the image's size. With a Filesystem claim, the size of the disk file made on
	// it when the image fills it. Immutable.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('64Mi')) >= 0 && quantity(string(self)).compareTo(quantity('64Ti')) <= 0",message="spec.guest.rootDisk.size must be between 64Mi and 64Ti, for example 10Gi"
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`
}

// Port is a guest port.
type Port struct {
	// name identifies the port, as in a container port: lower-case letters, digits and '-', at most 15 characters.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && self.matches('[a-z]') && !self.contains('--')",message="spec.guest.ports[].name must be an IANA service name such as http: lower-case letters, digits and single '-', with at least one letter"
	Name string `json:"name"`

	// port is the guest's port number, 1-65535.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// protocol is TCP (the default) or UDP.
	// +kubebuilder:validation:Enum=TCP;UDP
	// +kubebuilder:default=TCP
	// +optional
	Protocol corev1.Protocol `json:"protocol,omitempty"`
}

// ImageUpdatePolicy says when changed images reach a running guest.
// +kubebuilder:validation:Enum=OnRestart;Recreate;LiveMigrate
type ImageUpdatePolicy string

// Image update policies.
const (
	ImageUpdateOnRestart   ImageUpdatePolicy = "OnRestart"
	ImageUpdateRecreate    ImageUpdatePolicy = "Recreate"
	ImageUpdateLiveMigrate ImageUpdatePolicy = "LiveMigrate"
)

// Images are the images a runner pod is built from, after the controller's image map.
type Images struct {
	// runner is the runner container's image.
	Runner string `json:"runner"`
	// kernel is the image the guest kernel comes from; empty for a firmware boot.
	// +optional
	Kernel string `json:"kernel,omitempty"`
	// rootDisk is the image the root disk comes from.
	RootDisk string `json:"rootDisk"`
}

// Termination records how a runner pod ended.
type Termination struct {
	// exitCode of the runner.
	ExitCode int32 `json:"exitCode"`
	// reason is a one-word cause, such as Completed, Error or OOMKilled.
	// +optional
	Reason string `json:"reason,omitempty"`
	// message is the runner's termination message: what went wrong, in words.
	// +optional
	Message string `json:"message,omitempty"`
	// finishedAt is when the runner ended.
	// +optional
	FinishedAt metav1.Time `json:"finishedAt,omitempty"`
}

// VirtualMachineStatus is the observed virtual machine.
type VirtualMachineStatus struct {
	// phase is where the VM is in its life.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// podName is the runner pod's name.
	// +optional
	PodName string `json:"podName,omitempty"`
	// podUID is the UID of the runner pod this status describes.
	// +optional
	PodUID string `json:"podUID,omitempty"`
	// node is where the runner pod runs.
	// +optional
	Node string `json:"node,omitempty"`
	// podIP is the runner pod's IP, which the guest takes over.
	// +optional
	PodIP string `json:"podIP,omitempty"`
	// machine is the guest's QEMU machine type (pc-q35-7.2), pinned from the first node it
	// ran on (the node agent reports that node's QEMU). Every later runner pod, a migration's
	// target and a restart alike, gets the same, so the guest keeps its hardware on a newer
	// QEMU and can migrate onto one. Provider qemu only.
	// +optional
	// +kubebuilder:validation:Pattern=`^pc-q35-[0-9]{1,2}\.[0-9]{1,2}$`
	Machine string `json:"machine,omitempty"`
	// restartCount is how many times the guest was restarted after its runner pod ended or
	// vanished (crashes, power-offs under Always, lost pods); it drives the restart back-off.
	// +optional
	RestartCount int32 `json:"restartCount,omitempty"`
	// userRestartCount is how many new runs were started on request (runRequestedAt): a
	// running guest restarted, or an ended run started again. These have no back-off.
	// +optional
	UserRestartCount int32 `json:"userRestartCount,omitempty"`
	// lastRunRequest is the latest runRequestedAt a run was started for, so each request is
	// acted on once.
	// +optional
	LastRunRequest *metav1.Time `json:"lastRunRequest,omitempty"`
	// lastTermination is how the previous runner pod ended.
	// +optional
	LastTermination *Termination `json:"lastTermination,omitempty"`
	// images are the effective images: the spec's (and the controller's default runner image)
	// after the controller's image map. The next runner pod is built from these.
	// +optional
	Images *Images `json:"images,omitempty"`
	// observedGeneration is the spec generation this status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// guest is the size the running guest really has, as its runner reports it: it follows
	// spec.guest.cpus and memory once a live resize is done. Empty while no guest runs.
	// +optional
	Guest *GuestStatus `json:"guest,omitempty"`
	// suspendedState is the guest's saved state, while it waits on the state claim for a
	// resume; cleared once a runner loaded it (or a run request discarded it).
	// +optional
	SuspendedState *SuspendedState `json:"suspendedState,omitempty"`
	// lastSnapshot is the newest VirtualMachineSnapshot taken from the running guest, whose
	// dirty bitmap lets the next snapshot of the same run copy only what changed since.
	// +optional
	LastSnapshot *LastSnapshot `json:"lastSnapshot,omitempty"`

	// disks are the running guest's hotpluggable disks (spec.guest.disks[].hotplug) and where
	// each is: Attaching, Attached or Detaching (docs/hotplug.md). Empty while no guest runs.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Disks []HotplugDiskStatus `json:"disks,omitempty"`

	// conditions: ProviderAvailable, Scheduled, Ready, ImagesCurrent, SoftwareEmulation, and
	// DisksReady, Resized, Migratable, AgentConnected and Suspended on the VMs they concern.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// VirtualMachine is a virtual machine that runs in a runner pod.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vm;vms,categories=virtpod
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.runStrategy`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.status.podIP`
// +kubebuilder:printcolumn:name="Restarts",type=integer,JSONPath=`.status.restartCount`,priority=1
// +kubebuilder:printcolumn:name="User-Restarts",type=integer,JSONPath=`.status.userRestartCount`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 56 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label of at most 56 characters starting with a letter, because it names the runner pod and the guest's hostname"
type VirtualMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VirtualMachineSpec   `json:"spec"`
	Status VirtualMachineStatus `json:"status,omitempty"`
}

// VirtualMachineList is a list of VirtualMachines.
// +kubebuilder:object:root=true
type VirtualMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachine `json:"items"`
}

func init() {
	SchemeBuilder.Register(&VirtualMachine{}, &VirtualMachineList{})
}
