package podspec

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// FilesystemsMount is where the runner container sees the guest's shared directories, one
// folder per filesystem, named by its tag: the path the dev loop copies into
// (kubectl cp <file> <pod>:/virtpod/fs/<name>/ -c runner).
const FilesystemsMount = "/virtpod/fs"

func fsVolumeName(name string) string { return "fs-" + name }

// filesystems adds the VM's shares to the pod: each source as a volume mounted at
// FilesystemsMount/<name>, and the runner's --filesystem for it. The kubelet updates ConfigMap
// and Secret volumes in place (never with subPath, which it would not), so the guest sees the
// change.
func (p *diskParts) filesystems(g vmv1.GuestSpec) {
	for _, f := range g.Filesystems {
		vol := corev1.Volume{Name: fsVolumeName(f.Name)}
		mount := FilesystemsMount + "/" + f.Name
		switch {
		case f.ConfigMap != nil:
			vol.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: f.ConfigMap.Name}}
		case f.Secret != nil:
			// Readable by the runner's user alone, whom virtiofsd runs as.
			vol.Secret = &corev1.SecretVolumeSource{SecretName: f.Secret.SecretName, DefaultMode: ptr.To[int32](0o400)}
		case f.PersistentVolumeClaim != nil:
			c := f.PersistentVolumeClaim
			vol.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.ClaimName, ReadOnly: c.ReadOnly}
		case f.EmptyDir != nil:
			vol.EmptyDir = &corev1.EmptyDirVolumeSource{SizeLimit: f.EmptyDir.SizeLimit}
		default:
			continue // the API server refuses a filesystem without a source
		}
		p.volumes = append(p.volumes, vol)
		p.mounts = append(p.mounts, corev1.VolumeMount{Name: vol.Name, MountPath: mount, ReadOnly: f.ReadOnly()})
		p.shares = append(p.shares, runnerconfig.Filesystem{Tag: f.Name, Path: mount, ReadOnly: f.ReadOnly()})
	}
}

// filesystemMemory is what the shares' virtiofsd processes add to the pod's memory.
func filesystemMemory(g vmv1.GuestSpec) resource.Quantity {
	return *resource.NewQuantity(int64(len(g.Filesystems))*vmv1.FilesystemOverheadMiB<<20, resource.BinarySI)
}
