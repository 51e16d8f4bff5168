// Package podspec renders a VirtualMachine into its runner Pod. It is a pure function of the VM
// and the controller's options, so the same VM always yields the same Pod.
package podspec

import (
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/image/imagemap"
	"github.com/virtpod/virtpod/pkg/image/vmimage"
	"github.com/virtpod/virtpod/pkg/qemu"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// Labels virtpod puts on runner pods, and the pod's parts (the managed-by label and the runner
// container's name are vmv1's: the node side knows them too). The KVM resource is
// vmv1.ResourceKVM, the files of VM images are at pkg/image/vmimage's paths, and the runner's
// defaults are pkg/runnerconfig's.
const (
	LabelVMName   = "vm.virtpod.io/name"
	LabelProvider = "vm.virtpod.io/provider"
	RunnerBinary  = "/usr/local/bin/virtpod-runner"

	kernelVolume = "kernel"
	diskVolume   = "disk"

	kernelMount = "/virtpod/images/kernel"
	diskMount   = "/virtpod/images/disk"

	// CloudInitVolume is the Secret volume of a VM's cloud-init data; the kubelet mounts only
	// the keys the VM names, as these files, and the runner builds the seed disk from them.
	CloudInitVolume      = "cloud-init"
	cloudInitMount       = "/virtpod/cloud-init"
	cloudInitUserData    = "user-data"
	cloudInitNetworkData = "network-config"

	// stopMargin is added to the guest's grace period so the runner can stop the hypervisor
	// after the guest's time is up, before the kubelet kills it.
	stopMargin = 15
)

// Options are the controller-wide settings that shape every runner pod.
type Options struct {
	// RunnerImage is used when a VM does not name its own.
	RunnerImage string
	// OverheadCPU and OverheadMemory are added to the guest's cpus and memory for the runner
	// and the hypervisor itself.
	OverheadCPU    resource.Quantity
	OverheadMemory resource.Quantity
	// CPUAllocationRatio is how many guest vCPUs share one requested CPU: a pod requests
	// cpus/ratio (plus OverheadCPU), as KubeVirt's cpuAllocationRatio does; 1 reserves a whole
	// CPU per vCPU. Below 1 counts as 1.
	CPUAllocationRatio int
	// ImageMap rewrites image references (the development image map); the zero Map keeps them.
	ImageMap imagemap.Map
	// CopyImages delivers the kernel and disk by init containers that copy them out of their
	// images into emptyDirs, for clusters without image volumes. The images must carry
	// virtpod's copy program (images made by `imagebuild vm` do).
	CopyImages bool
	// Class is the VM's ProviderClass: its node selector, tolerations and overhead shape the pod.
	Class *vmv1.ProviderClass
	// Claims are the PersistentVolumeClaims the VM's disks name, as the controller read them
	// (disks.go): a claim's volumeMode decides between a mount and a device.
	Claims map[string]Claim
}

// DefaultOptions are the settings the manager starts with.
func DefaultOptions() Options {
	return Options{
		RunnerImage:        "virtpod/runner:latest",
		OverheadCPU:        resource.MustParse("50m"),
		OverheadMemory:     resource.MustParse("64Mi"),
		CPUAllocationRatio: 10,
	}
}

// PodName is the runner pod's name: one per VM, so a racing reconcile finds the pod instead of
// creating a second one.
func PodName(vmName string) string { return vmName + "-runner" }

// Labels are the runner pod's labels: the VM's own (so Services can select VMs by them) plus
// virtpod's, which win. A VM's keys under vm.virtpod.io/ are never copied: the pod's are
// virtpod's to set (config/admission refuses them on VMs; this holds for VMs stored before).
func Labels(vm *vmv1.VirtualMachine) map[string]string {
	l := make(map[string]string, len(vm.Labels)+3)
	for k, v := range vm.Labels {
		if !strings.HasPrefix(k, vmv1.ReservedKeyPrefix) {
			l[k] = v
		}
	}
	l[LabelVMName] = vm.Name
	l[LabelProvider] = string(vm.Spec.Provider)
	l[vmv1.LabelManagedBy] = vmv1.ManagedBy
	return l
}

// RunnerConfig is what the runner is told to boot.
func RunnerConfig(vm *vmv1.VirtualMachine) runnerconfig.Config {
	g := vm.Spec.Guest
	c := runnerconfig.Config{
		Name:               vm.Name,
		Provider:           string(vm.Spec.Provider),
		Acceleration:       runnerconfig.AccelKVM,
		GuestSize:          vmv1.GuestSize{CPUs: g.CPUs, MemoryMiB: ceilMiB(g.Memory)},
		RootDisk:           rootDiskPath(g.RootDisk),
		StateDir:           runnerconfig.DefaultStateDir,
		HTTPAddr:           runnerconfig.DefaultHTTPAddr,
		ControlSocket:      runnerconfig.DefaultControlSocket,
		Network:            vmv1.NetworkPod,
		GracePeriodSeconds: gracePeriod(vm),
	}
	if vm.Spec.Acceleration == vmv1.AccelerationEmulated {
		c.Acceleration = runnerconfig.AccelEmulated
	}
	if vm.Spec.Provider == vmv1.ProviderQEMU {
		// The machine the guest first ran with (status.machine), so a newer QEMU builds the
		// same hardware; "" before its first start.
		c.Machine = vm.Status.Machine
		c.GuestAgent = true
		c.HotplugSlots = vmv1.HotplugSlots // disks attached while it runs (docs/hotplug.md)
		if HasDisplay(vm) {
			c.Display = runnerconfig.DisplayVNC
		}
		if vm.Spec.Guest.StateClaim != nil {
			c.SuspendTo = vmv1.StateFile
			if Resumes(vm) {
				c.ResumeFrom = vmv1.StateFile
			}
		}
	}
	if g.NetworkMode != "" { // the runner's modes are the API's
		c.Network = g.NetworkMode
	}
	if g.KernelImage != "" {
		c.Kernel, c.Initrd, c.KernelArgs = kernelMount+vmimage.KernelPath, kernelMount+vmimage.InitrdPath, g.KernelArgs
	} else {
		c.Firmware = firmware(g.Firmware)
	}
	c.ReadinessProbe = runnerProbeConfig(g.ReadinessProbe)
	c.ControlSocket = runnerconfig.DefaultControlSocket
	if m := g.EffectiveMaxCPUs(); m > c.CPUs { // 0 otherwise: no CPU hotplug, the argv of old
		c.MaxCPUs = m
	}
	if m := ceilMiB(g.EffectiveMaxMemory()); m > c.MemoryMiB {
		c.MaxMemoryMiB = m
	}
	if g.RootDisk.Size != nil {
		c.DiskSizeMiB = ceilMiB(*g.RootDisk.Size)
	}
	if ci := g.CloudInit; ci != nil {
		// The UID is the instance-id: stable across the VM's restarts, new for a new VM of the
		// same name, so cloud-init runs its once-per-instance steps exactly once per VM.
		c.InstanceID = string(vm.UID)
		c.CloudInitUserData = cloudInitMount + "/" + cloudInitUserData
		if ci.NetworkDataKey != "" {
			c.CloudInitNetworkData = cloudInitMount + "/" + cloudInitNetworkData
		}
	}
	for _, p := range g.Ports {
		c.Ports = append(c.Ports, runnerconfig.Port{Name: p.Name, Port: p.Port, Protocol: string(protocol(p.Protocol))})
	}
	c.Defaults()
	return c
}

// rootDiskPath is where the root-disk image is mounted; "" when the root disk is a claim alone.
func rootDiskPath(r vmv1.RootDisk) string {
	if r.Image == "" {
		return ""
	}
	// The disk image's whole /disk: the runner picks root.img or the one containerDisk file.
	return diskMount + vmimage.DiskDir
}

// Images are the images vm's next runner pod is built from: the spec's, with the runner image
// of the VM's ProviderClass or else the controller's default, after the image map. Whether the
// VM may name its own runner image is the ProviderClass's to say (AllowsRunnerImage), checked by
// admission and by the controller before it builds a pod.
func Images(vm *vmv1.VirtualMachine, opts Options) vmv1.Images {
	runner := vm.Spec.RunnerImage
	if runner == "" && opts.Class != nil {
		runner = opts.Class.Spec.RunnerImage
	}
	if runner == "" {
		runner = opts.RunnerImage
	}
	im := vmv1.Images{
		Runner:   opts.ImageMap.Resolve(runner),
		RootDisk: opts.ImageMap.Resolve(vm.Spec.Guest.RootDisk.Image),
	}
	if k := vm.Spec.Guest.KernelImage; k != "" {
		im.Kernel = opts.ImageMap.Resolve(k)
	}
	return im
}

// PodImages are the images a runner pod was built from.
func PodImages(pod *corev1.Pod) vmv1.Images {
	var im vmv1.Images
	if c := runnerpod.Container(pod); c != nil {
		im.Runner = c.Image
	}
	for _, v := range pod.Spec.Volumes {
		if v.Image == nil {
			continue
		}
		switch v.Name {
		case kernelVolume:
			im.Kernel = v.Image.Reference
		case diskVolume:
			im.RootDisk = v.Image.Reference
		}
	}
	for _, c := range pod.Spec.InitContainers {
		switch c.Name {
		case kernelVolume:
			im.Kernel = c.Image
		case diskVolume:
			im.RootDisk = c.Image
		}
	}
	return im
}

// Build renders the runner pod of vm.
func Build(vm *vmv1.VirtualMachine, opts Options) *corev1.Pod {
	images := Images(vm, opts)
	dp := disks(vm, opts)
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      PodName(vm.Name),
			Namespace: vm.Namespace,
			Labels:    Labels(vm),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         vmv1.GroupVersion.String(),
				Kind:               "VirtualMachine",
				Name:               vm.Name,
				UID:                vm.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			Hostname:                      vm.Name,
			RestartPolicy:                 corev1.RestartPolicyNever, // the controller restarts, and counts
			TerminationGracePeriodSeconds: ptr.To(gracePeriod(vm) + stopMargin),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			NodeSelector:                  maps.Clone(vm.Spec.NodeSelector),
			Affinity:                      affinity(vm.Spec.Affinity, nodeRequirements(vm, opts.Class)),
			Tolerations:                   tolerations(vm, opts.Class),
			// Pod Security restricted: the runner's user, never root, and the claims and
			// emptyDirs the kubelet hands it writable by its group (docs/security.md).
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:        ptr.To(true),
				RunAsUser:           ptr.To(vmv1.RunnerUID),
				RunAsGroup:          ptr.To(vmv1.RunnerGID),
				FSGroup:             ptr.To(vmv1.RunnerGID),
				FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
				SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				// The runner relays the guest's ports, 22 and 80 among them, on the pod's
				// loopback and serves its DHCP on port 67, without CAP_NET_BIND_SERVICE. A
				// namespaced sysctl of Kubernetes' safe set (Pod Security restricted allows it);
				// it concerns this pod's network only.
				Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}},
			},
			Containers: []corev1.Container{runner(vm, images, opts, dp)},
			Volumes:    append(volumes(vm, images, opts.CopyImages), dp.volumes...),
		},
	}
	if opts.CopyImages {
		if images.Kernel != "" {
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, copier(kernelVolume, images.Kernel, vmimage.BootDir, kernelMount))
		}
		if images.RootDisk != "" {
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, copier(diskVolume, images.RootDisk, vmimage.DiskDir, diskMount))
		}
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, dp.copiers...)
	}
	return pod
}

// copier is an init container that runs the VM image's own copy program to copy src out of the
// image into the emptyDir at mount. It runs nothing else of the image, with no capabilities.
func copier(name, image, src, mount string) corev1.Container {
	return corev1.Container{
		Name:                     name,
		Image:                    image,
		ImagePullPolicy:          pullPolicy(image),
		Command:                  []string{vmimage.CopierPath, src, mount + src},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext:          restricted(),
		VolumeMounts:             []corev1.VolumeMount{{Name: name, MountPath: mount}},
	}
}

// restricted is every container's security context: what Pod Security restricted asks, with a
// read-only root filesystem besides.
func restricted() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		Privileged:               ptr.To(false),
		RunAsNonRoot:             ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

func runner(vm *vmv1.VirtualMachine, images vmv1.Images, opts Options, dp diskParts) corev1.Container {
	cfg := RunnerConfig(vm)
	cfg.Disks, cfg.RootVolume, cfg.Filesystems = dp.disks, dp.rootDisk, dp.shares
	withHotplugSlots(vm, &cfg)
	c := corev1.Container{
		Name:                     vmv1.RunnerContainer,
		Image:                    images.Runner,
		Command:                  []string{RunnerBinary},
		Args:                     cfg.Args(),
		Resources:                resources(vm, opts),
		ResizePolicy:             resizePolicy(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		// Started: the guest runs (the VM's phase Running). Ready: it also passes its own
		// readiness probe, if it has one (the VM's Ready). The startup probe never gives up:
		// the runner's boot watchdog ends a boot that hangs, with the reason.
		StartupProbe: &corev1.Probe{
			ProbeHandler:     runnerProbe("/startedz"),
			PeriodSeconds:    1,
			TimeoutSeconds:   5,
			FailureThreshold: startupChecks,
		},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:     runnerProbe("/readyz"),
			PeriodSeconds:    2,
			TimeoutSeconds:   5,
			FailureThreshold: 1,
		},
		// No capability: the node agent builds the guest's network in the pod's namespace and
		// makes the tap the runner's user's; /dev/kvm and /dev/net/tun come from the device
		// plugin. The same for every VM, whatever it boots: no VM field changes it.
		SecurityContext: restricted(),
		VolumeMounts:    []corev1.VolumeMount{{Name: "state", MountPath: runnerconfig.DefaultStateDir}},
	}
	if images.Kernel != "" {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: kernelVolume, MountPath: kernelMount, ReadOnly: true})
	}
	if images.RootDisk != "" {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: diskVolume, MountPath: diskMount, ReadOnly: true})
	}
	if vm.Spec.Guest.CloudInit != nil {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: CloudInitVolume, MountPath: cloudInitMount, ReadOnly: true})
	}
	c.VolumeMounts = append(c.VolumeMounts, dp.mounts...)
	c.VolumeDevices = dp.devices
	for _, p := range vm.Spec.Guest.Ports {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: p.Name, ContainerPort: p.Port, Protocol: protocol(p.Protocol)})
	}
	return c
}

// startupChecks is the startup probe's failure threshold: a day of one-second checks, so the
// kubelet never kills a runner for a slow start (a large disk to copy first, say).
const startupChecks = 24 * 60 * 60

// runnerProbe is an exec of the runner's probe command against one of its endpoints: the
// endpoint is a unix socket in the pod (the guest owns the pod IP), beyond an HTTP probe's reach.
func runnerProbe(path string) corev1.ProbeHandler {
	return corev1.ProbeHandler{Exec: &corev1.ExecAction{
		Command: []string{RunnerBinary, "probe", "--state-dir=" + runnerconfig.DefaultStateDir, "--http-addr=" + runnerconfig.DefaultHTTPAddr, "--path=" + path},
	}}
}

func volumes(vm *vmv1.VirtualMachine, images vmv1.Images, copyImages bool) []corev1.Volume {
	state := &corev1.EmptyDirVolumeSource{}
	if s := vm.Spec.Guest.RootDisk.Size; s != nil {
		// The overlay can grow to the disk's size; the rest is sockets and logs.
		limit := s.DeepCopy()
		limit.Add(resource.MustParse("64Mi"))
		state.SizeLimit = &limit
	}
	image := func(ref string) corev1.VolumeSource {
		if copyImages {
			return corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		}
		return corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: ref, PullPolicy: pullPolicy(ref)}}
	}
	vols := []corev1.Volume{{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: state}}}
	if images.Kernel != "" {
		vols = append(vols, corev1.Volume{Name: kernelVolume, VolumeSource: image(images.Kernel)})
	}
	if images.RootDisk != "" {
		vols = append(vols, corev1.Volume{Name: diskVolume, VolumeSource: image(images.RootDisk)})
	}
	if ci := vm.Spec.Guest.CloudInit; ci != nil {
		vols = append(vols, corev1.Volume{Name: CloudInitVolume, VolumeSource: corev1.VolumeSource{Secret: cloudInitSecret(ci)}})
	}
	return vols
}

// cloudInitSecret mounts only the keys the VM names, under fixed file names, readable by the
// runner alone. A missing Secret or key is the kubelet's FailedMount: virtpod never reads it.
func cloudInitSecret(ci *vmv1.CloudInit) *corev1.SecretVolumeSource {
	key := ci.UserDataKey
	if key == "" {
		key = vmv1.DefaultUserDataKey
	}
	items := []corev1.KeyToPath{{Key: key, Path: cloudInitUserData}}
	if ci.NetworkDataKey != "" {
		items = append(items, corev1.KeyToPath{Key: ci.NetworkDataKey, Path: cloudInitNetworkData})
	}
	return &corev1.SecretVolumeSource{SecretName: ci.SecretRef.Name, Items: items, DefaultMode: ptr.To[int32](0o400)}
}

// pullPolicy follows the Kubernetes default for containers: Always for :latest or no tag.
func pullPolicy(ref string) corev1.PullPolicy {
	if strings.Contains(ref, "@") {
		return corev1.PullIfNotPresent
	}
	last := ref[strings.LastIndex(ref, "/")+1:]
	if _, tag, ok := strings.Cut(last, ":"); !ok || tag == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// resources are the runner's for the guest's size in the spec (resize.go: for any size).
func resources(vm *vmv1.VirtualMachine, opts Options) corev1.ResourceRequirements {
	return Resources(vm, opts, vm.Spec.Guest.CPUs, vm.Spec.Guest.Memory)
}

func onlyCPUMemory(l corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for _, k := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := l[k]; ok {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[k] = q.DeepCopy()
		}
	}
	return out
}

// Resources are the runner container's resources for a guest of cpus and memory: what it uses
// now, never its maximum, so a live resize changes them in place.
func Resources(vm *vmv1.VirtualMachine, opts Options, cpus int32, memory resource.Quantity) corev1.ResourceRequirements {
	if vm.Spec.PodResources != nil {
		// cpu and memory only, as the CRD says: a VM stored before that rule gets no device
		// or extended resource from its spec either.
		r := corev1.ResourceRequirements{
			Requests: onlyCPUMemory(vm.Spec.PodResources.Requests),
			Limits:   onlyCPUMemory(vm.Spec.PodResources.Limits),
		}
		addKVM(vm, &r)
		return r
	}
	ratio := int64(max(opts.CPUAllocationRatio, 1))
	vcpuMilli := int64(cpus) * 1000
	// Rounded up, so a request never reaches 0 for a guest that has vCPUs.
	cpu := *resource.NewMilliQuantity((vcpuMilli+ratio-1)/ratio, resource.DecimalSI)
	cpu.Add(opts.OverheadCPU)
	cpuLimit := *resource.NewMilliQuantity(vcpuMilli, resource.DecimalSI)
	cpuLimit.Add(opts.OverheadCPU)
	mem := memory.DeepCopy()
	mem.Add(opts.OverheadMemory)
	mem.Add(filesystemMemory(vm.Spec.Guest))
	mem.Add(displayMemory(vm))
	if vm.Spec.Acceleration == vmv1.AccelerationEmulated {
		// Emulation keeps translated code beside the guest's memory, up to QEMU's tb-size.
		hotplug := vm.Spec.Guest.MaxCPUs != nil && *vm.Spec.Guest.MaxCPUs > 1 // over-reserves for a guest booted at its maximum, never under
		mem.Add(*resource.NewQuantity(qemu.TCGTranslationCacheMiB(memory.Value()>>20, hotplug)<<20, resource.BinarySI))
	}
	if opts.Class != nil {
		// The class's overhead is the hypervisor's own, added as RuntimeClass's is.
		if q, ok := opts.Class.Spec.Overhead[corev1.ResourceCPU]; ok {
			cpu.Add(q)
			cpuLimit.Add(q)
		}
		if q, ok := opts.Class.Spec.Overhead[corev1.ResourceMemory]; ok {
			mem.Add(q)
		}
	}
	// The request is a share (cpus/ratio): without a limit an overcommitted VM could take the
	// node's idle CPU as if it had been promised it. The limit is the vCPUs the guest was given
	// plus the overhead, and never less than cpuLimitMargin above the vCPUs: the guest's vCPU
	// threads alone can fill the vCPUs, and a quota of exactly that would throttle QEMU's main
	// loop and I/O threads (and the runner) whenever the guest is busy. Memory is capped at what
	// was asked for so a guest cannot take the node's memory.
	if margin := *resource.NewMilliQuantity(vcpuMilli+cpuLimitMarginMilli, resource.DecimalSI); cpuLimit.Cmp(margin) < 0 {
		cpuLimit = margin
	}
	r := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: cpuLimit, corev1.ResourceMemory: mem},
	}
	addKVM(vm, &r)
	return r
}

// cpuLimitMarginMilli is the least CPU a pod's limit keeps above its vCPUs, for QEMU's main loop
// and I/O threads and the runner (see Resources).
const cpuLimitMarginMilli = 250

// addKVM adds the devices every runner gets from virtpod's device plugin: its control
// directory (resize.go) and, unless emulated, /dev/kvm.
func addKVM(vm *vmv1.VirtualMachine, r *corev1.ResourceRequirements) {
	one := resource.MustParse("1")
	if r.Requests == nil {
		r.Requests = corev1.ResourceList{}
	}
	if r.Limits == nil {
		r.Limits = corev1.ResourceList{}
	}
	r.Requests[vmv1.ResourceControl] = one
	r.Limits[vmv1.ResourceControl] = one
	if vm.Spec.Acceleration == vmv1.AccelerationEmulated {
		return
	}
	r.Requests[vmv1.ResourceKVM] = one
	r.Limits[vmv1.ResourceKVM] = one
}

func tolerations(vm *vmv1.VirtualMachine, class *vmv1.ProviderClass) []corev1.Toleration {
	if class == nil || class.Spec.Scheduling == nil || len(class.Spec.Scheduling.Tolerations) == 0 {
		return vm.Spec.Tolerations
	}
	return append(append([]corev1.Toleration(nil), vm.Spec.Tolerations...), class.Spec.Scheduling.Tolerations...)
}

func gracePeriod(vm *vmv1.VirtualMachine) int64 {
	if p := vm.Spec.TerminationGracePeriodSeconds; p != nil {
		return *p
	}
	return runnerconfig.DefaultGracePeriodSeconds
}

// firmware is the runner's name of a firmware; BIOS when the VM names none.
func firmware(f vmv1.Firmware) string {
	if f == vmv1.FirmwareUEFI {
		return runnerconfig.FirmwareUEFI
	}
	return runnerconfig.FirmwareBIOS
}

func protocol(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

func ceilMiB(q resource.Quantity) int64 { return vmv1.CeilMiB(q.Value()) }
