// Package migratable decides whether a running VM's guest can be live-migrated to another node,
// and if not, why, in words that name the field and the fix. Pure: the VM and its runner pod in,
// a verdict out; the VM controller shows it as the Migratable condition and the migration
// controller refuses with it.
package migratable

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// Verdict is whether the guest can move: Reason is vmv1.ReasonMigratable when it can.
type Verdict struct {
	Reason, Message string
}

// OK says the guest can move.
func (v Verdict) OK() bool { return v.Reason == vmv1.ReasonMigratable }

// Check decides for the VM's guest running in pod (its runner pod). What runs is what moves, so
// the pod's own arguments and volumes count beside the spec, whose changes wait for a restart.
func Check(vm *vmv1.VirtualMachine, pod *corev1.Pod) Verdict {
	if vm.Spec.Provider != vmv1.ProviderQEMU {
		return Verdict{vmv1.ReasonProviderNotMigratable, fmt.Sprintf("spec.provider is %s: only qemu guests migrate; "+
			"create the VM with provider qemu to migrate it", vm.Spec.Provider)}
	}
	// Before the network: shares cannot be fixed by a restart, so a user who followed the
	// network's advice would only meet this next.
	if why := shared(pod); why != "" {
		return Verdict{vmv1.ReasonFilesystemNotMigratable, why}
	}
	if vm.Spec.Guest.NetworkMode != vmv1.NetworkMasquerade {
		return Verdict{vmv1.ReasonNetworkNotMigratable, "spec.guest.networkMode is Pod: the guest owns the pod's IP, which stays with the pod; " +
			"set spec.guest.networkMode: Masquerade (the guest keeps a fixed address behind the pod IP), which applies at the next start"}
	}
	flag, _ := runnerpod.Value(pod, "--network")
	if running, _ := vmv1.ParseNetworkFlag(flag); running != vmv1.NetworkMasquerade {
		return Verdict{vmv1.ReasonNetworkNotMigratable, fmt.Sprintf("spec.guest.networkMode is Masquerade, but the running guest started with the pod network "+
			"(runner pod %s); it applies at the next start: restart the VM (vmctl restart %s)", pod.Name, vm.Name)}
	}
	if why := unsharedClaim(vm, pod); why != "" {
		return Verdict{vmv1.ReasonDiskNotMigratable, why}
	}
	if why := hotplugged(pod); why != "" {
		return Verdict{vmv1.ReasonDiskNotMigratable, why}
	}
	if why := resized(vm, pod); why != "" {
		return Verdict{vmv1.ReasonGuestResized, why + "; a target is built at the boot size, so hotplugged CPUs and memory would not be there: " +
			"restart the VM (vmctl restart " + vm.Name + ") to migrate it at its new size"}
	}
	return Verdict{vmv1.ReasonMigratable, fmt.Sprintf("the guest can move to another node (runner pod %s)", pod.Name)}
}

// shared says why the guest running in pod cannot move when it has virtio-fs shares ("" when
// it has none): each virtiofsd holds the guest's open files and their handles, which QEMU
// marks a migration blocker unless virtiofsd's own migration (1.13, find-paths) carries them,
// and virtpod does not drive that yet (docs/filesystems.md).
func shared(pod *corev1.Pod) string {
	var tags []string
	for _, value := range runnerpod.Values(pod, "--filesystem") {
		if f, err := runnerconfig.ParseFilesystem(value); err == nil {
			tags = append(tags, f.Tag)
		}
	}
	if len(tags) == 0 {
		return ""
	}
	return fmt.Sprintf("the running guest has virtio-fs filesystems (%s; runner pod %s), whose open files virtpod does not carry to another node: "+
		"remove spec.guest.filesystems and restart the VM to make it migratable, or keep spec.evictionStrategy None (a drain then stops it)", strings.Join(tags, ", "), pod.Name)
}

// unsharedClaim names the first claim of the running guest that a migration can neither attach
// on the target nor copy ("" when there is none): the runner pod's disk flags say, as the
// controller built them from the claims' access modes, which a claim cannot change. The target
// attaches a shared claim too (migrate=shared: ReadWriteMany, or ReadOnlyMany used read-only);
// a writable one only one node attaches is copied into a claim made for the target
// (migrate=copy); a read-only one only one node attaches is neither.
func unsharedClaim(vm *vmv1.VirtualMachine, pod *corev1.Pod) string {
	const fix = "a live migration's target cannot attach it while the source holds it, and a read-only disk is not copied; " +
		"use a claim whose access modes include ReadOnlyMany (both nodes attach it), make the disk writable (the migration then copies it), or keep spec.evictionStrategy None"
	for _, f := range diskFlags(pod) {
		d := f.disk
		if d.Kind != runnerconfig.DiskBlock && d.Kind != runnerconfig.DiskFile || d.Migrate == runnerconfig.MigrateShared || d.Migrate == runnerconfig.MigrateCopy && !d.ReadOnly {
			continue
		}
		claim := claimOf(pod, d)
		if f.root {
			return fmt.Sprintf("the root disk is on claim %s, which one node at a time can attach (runner pod %s): %s", claim, pod.Name, fix)
		}
		field := "a disk the running guest started with"
		for i, sd := range vm.Spec.Guest.Disks {
			if sd.Name == d.Name {
				field = fmt.Sprintf("spec.guest.disks[%d] (%s)", i, d.Name)
			}
		}
		return fmt.Sprintf("%s is on claim %s, which one node at a time can attach (runner pod %s): %s", field, claim, pod.Name, fix)
	}
	return ""
}

// CopiedClaims are the claims of the guest running in pod that a migration copies into claims
// made for the target (migrate=copy), by disk (root, or the data disk's name), in the pod's
// order: the runner pod's disk flags say, as for unsharedClaim.
func CopiedClaims(pod *corev1.Pod) []vmv1.MigratedClaim {
	var out []vmv1.MigratedClaim
	for _, f := range diskFlags(pod) {
		if f.disk.Migrate != runnerconfig.MigrateCopy || f.disk.ReadOnly {
			continue
		}
		disk := f.disk.Name
		if f.root {
			disk = vmv1.RootDiskName
		}
		if claim := claimOf(pod, f.disk); claim != "?" {
			out = append(out, vmv1.MigratedClaim{Disk: disk, Source: claim})
		}
	}
	return out
}

// diskFlag is one --disk or --root-volume flag of a runner pod, parsed.
type diskFlag struct {
	root bool // --root-volume
	disk runnerconfig.Disk
}

// diskFlags are the runner container's disk flags that parse, in order.
func diskFlags(pod *corev1.Pod) []diskFlag {
	var out []diskFlag
	for _, a := range runnerpod.Args(pod) {
		flag, value, _ := strings.Cut(a, "=")
		if flag != "--root-volume" && flag != "--disk" {
			continue
		}
		if d, err := runnerconfig.ParseDisk(value); err == nil {
			out = append(out, diskFlag{root: flag == "--root-volume", disk: d})
		}
	}
	return out
}

// claimOf names the claim behind a disk flag of pod, by the volume mounted (or handed as a
// device) at the disk's path.
func claimOf(pod *corev1.Pod, d runnerconfig.Disk) string {
	vol := ""
	for _, c := range pod.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if m.MountPath == d.Path {
				vol = m.Name
			}
		}
		for _, m := range c.VolumeDevices {
			if m.DevicePath == d.Path {
				vol = m.Name
			}
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.Name == vol && v.PersistentVolumeClaim != nil {
			return v.PersistentVolumeClaim.ClaimName
		}
	}
	return "?"
}

// resized says how the guest's size differs from the one it booted with ("" when it does not):
// asked for (the spec or the desired-* annotations) or reported (the guest-* annotations).
func resized(vm *vmv1.VirtualMachine, pod *corev1.Pod) string {
	cpus, _ := runnerpod.Value(pod, "--cpus")
	mib, _ := runnerpod.Value(pod, "--memory-mib")
	boot := fmt.Sprintf("%s CPUs and %s MiB", cpus, mib)
	if strconv.Itoa(int(vm.Spec.Guest.CPUs)) != cpus || strconv.FormatInt(vmv1.CeilMiB(vm.Spec.Guest.Memory.Value()), 10) != mib {
		return fmt.Sprintf("spec.guest asks for %d CPUs and %s, the guest booted with %s", vm.Spec.Guest.CPUs, vm.Spec.Guest.Memory.String(), boot)
	}
	for _, k := range []string{vmv1.AnnotationDesiredCPUs, vmv1.AnnotationGuestCPUs} {
		if v, ok := pod.Annotations[k]; ok && v != cpus {
			return fmt.Sprintf("the guest was resized since it started (%s %s; it booted with %s)", k, v, boot)
		}
	}
	for _, k := range []string{vmv1.AnnotationDesiredMemory, vmv1.AnnotationGuestMemory} {
		v, ok := pod.Annotations[k]
		if q, err := resource.ParseQuantity(v); ok && (err != nil || strconv.FormatInt(vmv1.CeilMiB(q.Value()), 10) != mib) {
			return fmt.Sprintf("the guest was resized since it started (%s %s; it booted with %s)", k, v, boot)
		}
	}
	return ""
}
