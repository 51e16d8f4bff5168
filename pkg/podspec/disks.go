package podspec

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/image/vmimage"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// Where a VM's disks appear in the runner container: data disks' volumes under disksMount, their
// block devices under devicesDir, each by the disk's name; the root disk's claim at rootMount
// (Filesystem) or rootDevice (Block).
const (
	disksMount = "/virtpod/disks"
	devicesDir = "/dev/virtpod"
	rootClaim  = "root-claim"
	rootMount  = "/virtpod/root"
	rootDevice = devicesDir + "/" + vmv1.RootDiskName
	// stateClaimVolume is the state claim's volume (spec.guest.stateClaim), mounted at
	// vmv1.StateMount.
	stateClaimVolume = "state-claim"
)

// Claim is what the controller read of a PersistentVolumeClaim a VM names: it decides how the
// claim reaches the runner. The controller never builds a pod for a claim it could not read.
type Claim struct {
	// Block: volumeMode Block, handed to the pod as a device; otherwise a mounted folder.
	Block bool
	// SizeMiB is the claim's capacity (its request while unbound); 0 when unknown, and the
	// runner then takes the volume's size.
	SizeMiB int64
	// ReadWriteMany and ReadOnlyMany: the claim's access modes allow nodes to attach it at
	// once, for writing or for reading; a live migration's target then attaches the same
	// volume, and nothing is copied.
	ReadWriteMany, ReadOnlyMany bool
}

// migrate is how a live migration carries the claim, used for writing or not: the target
// attaches the same volume when its access modes let a second node attach it (shared); a
// writable claim only one node attaches (ReadWriteOnce, ReadWriteOncePod) is copied into a
// claim made for the target (copy); "" for a read-only one: the target cannot attach it while
// the source holds it, and the guest is not migratable.
func (c Claim) migrate(readOnly bool) string {
	switch {
	case c.ReadWriteMany || readOnly && c.ReadOnlyMany:
		return runnerconfig.MigrateShared
	case readOnly:
		return ""
	}
	return runnerconfig.MigrateCopy
}

// ClaimOf reads what a runner pod needs of a claim.
func ClaimOf(pvc *corev1.PersistentVolumeClaim) Claim {
	c := Claim{Block: pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock}
	// A bound claim's modes are its volume's; an unbound one's are what it asks for.
	modes := pvc.Status.AccessModes
	if len(modes) == 0 {
		modes = pvc.Spec.AccessModes
	}
	c.ReadWriteMany = slices.Contains(modes, corev1.ReadWriteMany)
	c.ReadOnlyMany = slices.Contains(modes, corev1.ReadOnlyMany)
	size, ok := pvc.Status.Capacity[corev1.ResourceStorage]
	if !ok {
		size, ok = pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	}
	if ok {
		// Down, not up: a file one byte larger than the volume could not be written to its end.
		c.SizeMiB = size.Value() >> 20
	}
	return c
}

// DiskVolumeName is the runner pod's volume of data disk name.
func DiskVolumeName(name string) string { return "disk-" + name }

// diskParts is what a VM's disks add to its runner pod and flags.
type diskParts struct {
	volumes  []corev1.Volume
	mounts   []corev1.VolumeMount
	devices  []corev1.VolumeDevice
	copiers  []corev1.Container // with CopyImages: the image disks' copy init containers
	disks    []runnerconfig.Disk
	rootDisk *runnerconfig.Disk
	shares   []runnerconfig.Filesystem // the virtio-fs shares (filesystems.go)
}

// disks renders the VM's data disks, its root disk's claim and its shared filesystems. PVCs,
// ConfigMaps and Secrets go by reference: the kubelet mounts them, nothing of their contents is in the pod.
func disks(vm *vmv1.VirtualMachine, opts Options) diskParts {
	var p diskParts
	g := vm.Spec.Guest
	if c := g.RootDisk.PersistentVolumeClaim; c != nil {
		claim := opts.Claims[c.ClaimName]
		p.volumes = append(p.volumes, corev1.Volume{Name: rootClaim, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.ClaimName}}})
		if claim.Block {
			p.devices = append(p.devices, corev1.VolumeDevice{Name: rootClaim, DevicePath: rootDevice})
			p.rootDisk = &runnerconfig.Disk{Kind: runnerconfig.DiskBlock, Path: rootDevice}
		} else {
			p.mounts = append(p.mounts, corev1.VolumeMount{Name: rootClaim, MountPath: rootMount})
			p.rootDisk = &runnerconfig.Disk{Kind: runnerconfig.DiskFile, Path: rootMount}
		}
		p.rootDisk.Migrate = claim.migrate(false)
	}
	if c := g.StateClaim; c != nil {
		p.volumes = append(p.volumes, corev1.Volume{Name: stateClaimVolume, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.ClaimName}}})
		p.mounts = append(p.mounts, corev1.VolumeMount{Name: stateClaimVolume, MountPath: vmv1.StateMount})
	}
	for _, d := range g.Disks {
		vol := corev1.Volume{Name: DiskVolumeName(d.Name)}
		mount := disksMount + "/" + d.Name
		rd := runnerconfig.Disk{Name: d.Name, Path: mount}
		switch {
		case d.PersistentVolumeClaim != nil:
			c := d.PersistentVolumeClaim
			claim := opts.Claims[c.ClaimName]
			vol.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.ClaimName, ReadOnly: c.ReadOnly}
			rd.ReadOnly, rd.Migrate = c.ReadOnly, claim.migrate(c.ReadOnly)
			if claim.Block {
				rd.Kind, rd.Path = runnerconfig.DiskBlock, devicesDir+"/"+d.Name
				p.devices = append(p.devices, corev1.VolumeDevice{Name: vol.Name, DevicePath: rd.Path})
			} else {
				rd.Kind, rd.SizeMiB = runnerconfig.DiskFile, claim.SizeMiB
				p.mounts = append(p.mounts, corev1.VolumeMount{Name: vol.Name, MountPath: mount, ReadOnly: c.ReadOnly})
			}
		case d.EmptyDisk != nil:
			rd.Kind, rd.SizeMiB = runnerconfig.DiskEmpty, ceilMiB(d.EmptyDisk.Size)
			// The disk file is sparse; the limit is what the guest may fill, plus a margin for
			// the file system's own blocks.
			limit := d.EmptyDisk.Size.DeepCopy()
			limit.Add(resource.MustParse("1Mi"))
			vol.EmptyDir = &corev1.EmptyDirVolumeSource{SizeLimit: &limit}
			p.mounts = append(p.mounts, corev1.VolumeMount{Name: vol.Name, MountPath: mount})
		case d.ConfigMap != nil:
			rd.Kind, rd.ReadOnly = runnerconfig.DiskFiles, true
			vol.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: d.ConfigMap.Name}}
			p.mounts = append(p.mounts, corev1.VolumeMount{Name: vol.Name, MountPath: mount, ReadOnly: true})
		case d.Secret != nil:
			rd.Kind, rd.ReadOnly = runnerconfig.DiskFiles, true
			// Readable by the runner alone; a missing Secret is the kubelet's FailedMount.
			vol.Secret = &corev1.SecretVolumeSource{SecretName: d.Secret.SecretName, DefaultMode: ptr.To[int32](0o400)}
			p.mounts = append(p.mounts, corev1.VolumeMount{Name: vol.Name, MountPath: mount, ReadOnly: true})
		case d.Image != nil:
			ref := opts.ImageMap.Resolve(d.Image.Ref)
			rd.Kind, rd.ReadOnly, rd.Path = runnerconfig.DiskImage, true, mount+vmimage.DiskPath
			if opts.CopyImages {
				vol.EmptyDir = &corev1.EmptyDirVolumeSource{}
				p.copiers = append(p.copiers, copier(vol.Name, ref, vmimage.DiskDir, mount))
			} else {
				vol.Image = &corev1.ImageVolumeSource{Reference: ref, PullPolicy: pullPolicy(ref)}
			}
			p.mounts = append(p.mounts, corev1.VolumeMount{Name: vol.Name, MountPath: mount, ReadOnly: true})
		default:
			continue // the API server refuses a disk without a source
		}
		p.volumes = append(p.volumes, vol)
		p.disks = append(p.disks, rd)
	}
	p.filesystems(g)
	return p
}
