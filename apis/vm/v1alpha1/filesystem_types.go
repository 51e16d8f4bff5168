package v1alpha1

import "k8s.io/apimachinery/pkg/api/resource"

// MaxFilesystems is how many filesystems a guest may have (guest.filesystems' maxItems repeats
// it): each is a vhost-user-fs PCI device served by its own virtiofsd in the runner pod.
const MaxFilesystems = 8

// FilesystemOverheadMiB is the memory the runner pod gets for each share's virtiofsd beyond the
// guest; the runner test checks a daemon's peak against it (docs/filesystems.md).
const FilesystemOverheadMiB = 16

// MaxFilesystemTag is the longest virtio-fs tag: the device's config space holds 36 bytes.
const MaxFilesystemTag = 36

// Filesystem is a directory of the runner pod shared live into the guest through virtio-fs: a
// virtiofsd in the runner container serves it, unprivileged, and the guest mounts it by its
// name (`mount -t virtiofs <name> /mnt/<name>`, or a cloud-init mounts entry). What changes on
// the pod's side shows in the guest at once: a ConfigMap or Secret as the kubelet updates its
// volume, files copied into the runner container (the dev loop, docs/dev-loop.md). Needs a
// runner image with virtiofsd (the Debian 13 runner, docs/images.md); a guest with
// filesystems cannot live-migrate or suspend (docs/filesystems.md).
// +kubebuilder:validation:XValidation:rule="[has(self.configMap), has(self.secret), has(self.persistentVolumeClaim), has(self.emptyDir)].filter(x, x).size() == 1",message="spec.guest.filesystems[]: give exactly one source: configMap, secret, persistentVolumeClaim or emptyDir"
type Filesystem struct {
	// name is the virtio-fs tag the guest mounts the filesystem by: a DNS label of at most 36
	// characters, unique among the VM's filesystems. The runner container sees the directory at
	// /virtpod/fs/<name>.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=36
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="spec.guest.filesystems[].name must be a DNS label such as web: lower-case letters, digits and '-', at most 36 characters (it is the virtio-fs tag the guest mounts)"
	Name string `json:"name"`

	// configMap: the ConfigMap's keys as read-only files, updated in the guest as the kubelet
	// updates the volume (within its sync period), without a restart.
	// +optional
	ConfigMap *FilesystemConfigMap `json:"configMap,omitempty"`

	// secret: the Secret's keys as read-only files, updated like a ConfigMap's. virtpod never
	// reads the Secret: the kubelet mounts it into the runner pod.
	// +optional
	Secret *FilesystemSecret `json:"secret,omitempty"`

	// persistentVolumeClaim: a Filesystem claim's volume as a directory, shared into the guest
	// instead of a block device. Two VMs never write one claim.
	// +optional
	PersistentVolumeClaim *ClaimDiskSource `json:"persistentVolumeClaim,omitempty"`

	// emptyDir: a writable directory that lives as long as the runner pod, which the dev loop
	// copies files into (kubectl cp, Tilt's live_update sync).
	// +optional
	EmptyDir *FilesystemEmptyDir `json:"emptyDir,omitempty"`
}

// FilesystemConfigMap names a ConfigMap in the VM's namespace.
type FilesystemConfigMap struct {
	// name of the ConfigMap. A missing ConfigMap holds the VM with a DisksReady condition.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="spec.guest.filesystems[].configMap.name must be a ConfigMap name (a DNS subdomain) such as app-config"
	Name string `json:"name"`
}

// FilesystemSecret names a Secret in the VM's namespace.
type FilesystemSecret struct {
	// secretName is the Secret's name. virtpod never reads it; a missing Secret keeps the runner
	// pod from starting, and the pod's FailedMount event names it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="spec.guest.filesystems[].secret.secretName must be a Secret name (a DNS subdomain) such as tls-certs"
	SecretName string `json:"secretName"`
}

// FilesystemEmptyDir is a writable directory of the runner pod.
type FilesystemEmptyDir struct {
	// sizeLimit bounds what the directory may hold (the kubelet evicts the pod beyond it), at
	// most 1Ti; none when empty. It counts against the node's ephemeral storage.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('1Mi')) >= 0 && quantity(string(self)).compareTo(quantity('1Ti')) <= 0",message="spec.guest.filesystems[].emptyDir.sizeLimit must be between 1Mi and 1Ti, for example 1Gi"
	// +optional
	SizeLimit *resource.Quantity `json:"sizeLimit,omitempty"`
}

// ReadOnly says whether the guest may only read the filesystem: ConfigMaps and Secrets (the
// kubelet's volume is read-only) and claims attached readOnly.
func (f *Filesystem) ReadOnly() bool {
	return f.ConfigMap != nil || f.Secret != nil || f.PersistentVolumeClaim != nil && f.PersistentVolumeClaim.ReadOnly
}
