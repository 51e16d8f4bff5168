package v1alpha1

import (
	"iter"
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"
)

// MaxDisks is how many data disks a guest may have (guest.disks' maxItems repeats it): each is a
// virtio-blk PCI device, and the q35 machine's root bus has room for them beside the root disk,
// the cloud-init seed and the network card.
const MaxDisks = 16

// RootDiskName is the root disk's name: no data disk may take it. CloudInitDiskName is the
// cloud-init seed's label, which a data disk's label would shadow.
const (
	RootDiskName      = "root"
	CloudInitDiskName = "cidata"
)

// Disk is a data disk: a name, which the guest sees as the disk's serial
// (/dev/disk/by-id/virtio-<name>), and exactly one source. Disks are attached in list order after
// the root disk (and the cloud-init seed). A change applies at the guest's next start.
// +kubebuilder:validation:XValidation:rule="[has(self.persistentVolumeClaim), has(self.emptyDisk), has(self.configMap), has(self.secret), has(self.image)].filter(x, x).size() == 1",message="spec.guest.disks[]: give exactly one source: persistentVolumeClaim, emptyDisk, configMap, secret or image"
// +kubebuilder:validation:XValidation:rule="!(has(self.hotplug) && self.hotplug && has(self.image))",message="spec.guest.disks[].hotplug: an image disk cannot be hotplugged (its image volume belongs to the runner pod); drop hotplug, or use a claim"
type Disk struct {
	// name of the disk, also its serial: a DNS label of at most 20 characters (a virtio-blk
	// serial holds 20 bytes), unique among the VM's disks, and neither root nor cidata.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=20
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="spec.guest.disks[].name must be a DNS label such as data: lower-case letters, digits and '-', at most 20 characters (it is the disk's serial)"
	// +kubebuilder:validation:XValidation:rule="self != 'root' && self != 'cidata'",message="spec.guest.disks[].name: root and cidata name the root disk and the cloud-init seed; choose another name"
	Name string `json:"name"`

	// persistentVolumeClaim: a PVC in the VM's namespace. A claim with volumeMode Block is the
	// disk itself; with Filesystem, the disk is the file disk.img on the volume, made sparse at
	// the claim's capacity on first use and never made again. Data outlives the VM.
	// +optional
	PersistentVolumeClaim *ClaimDiskSource `json:"persistentVolumeClaim,omitempty"`

	// emptyDisk: a blank disk that lives as long as the runner pod (every start begins empty).
	// +optional
	EmptyDisk *EmptyDiskSource `json:"emptyDisk,omitempty"`

	// configMap: the ConfigMap's keys as files on a small read-only ISO 9660 disk labelled with
	// the disk's name, built at every start.
	// +optional
	ConfigMap *ConfigMapDiskSource `json:"configMap,omitempty"`

	// secret: the Secret's keys as files on a small read-only ISO 9660 disk labelled with the
	// disk's name. virtpod never reads the Secret: the kubelet mounts it into the runner pod.
	// +optional
	Secret *SecretDiskSource `json:"secret,omitempty"`

	// image: a read-only disk from an OCI image that carries it at /disk/root.img, as a root disk
	// image does (raw or qcow2), delivered by an image volume.
	// +optional
	Image *ImageDiskSource `json:"image,omitempty"`

	// hotplug puts the disk on one of the guest's hotplug slots (at most 4 such disks, qemu
	// only, not image disks): added to a running VM's spec, the disk is attached to the guest
	// now; removed, it is detached now, once the guest releases it (docs/hotplug.md). Without
	// it, a disk change applies at the next start.
	// +optional
	Hotplug bool `json:"hotplug,omitempty"`
}

// ClaimDiskSource names a PersistentVolumeClaim in the VM's namespace.
type ClaimDiskSource struct {
	// claimName is the PersistentVolumeClaim's name. Two VMs never write one claim: a VM whose
	// claim another VM uses waits, with a DisksReady condition naming that VM.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="claimName must be a PersistentVolumeClaim name (a DNS subdomain) such as data-1: lower-case letters, digits, '-' and '.'"
	ClaimName string `json:"claimName"`

	// readOnly attaches the disk read-only: the guest cannot write it, and VMs that all read
	// a claim may share it.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
}

// EmptyDiskSource is a blank disk.
type EmptyDiskSource struct {
	// The schema bounds the string's length so the API server's cost estimate of the rule, run
	// for every disk, stays within its budget.

	// size of the disk, between 1Mi and 1Ti; it counts against the node's ephemeral storage
	// only as far as the guest writes it.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('1Mi')) >= 0 && quantity(string(self)).compareTo(quantity('1Ti')) <= 0",message="spec.guest.disks[].emptyDisk.size must be between 1Mi and 1Ti, for example 1Gi"
	Size resource.Quantity `json:"size"`
}

// ConfigMapDiskSource names a ConfigMap in the VM's namespace.
type ConfigMapDiskSource struct {
	// name of the ConfigMap. A missing ConfigMap holds the VM with a DisksReady condition.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="spec.guest.disks[].configMap.name must be a ConfigMap name (a DNS subdomain) such as app-config"
	Name string `json:"name"`
}

// SecretDiskSource names a Secret in the VM's namespace.
type SecretDiskSource struct {
	// secretName is the Secret's name. virtpod never reads it; a missing Secret keeps the runner
	// pod from starting, and the pod's FailedMount event names it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="spec.guest.disks[].secret.secretName must be a Secret name (a DNS subdomain) such as db-credentials"
	SecretName string `json:"secretName"`
}

// ImageDiskSource is an OCI image carrying a disk.
type ImageDiskSource struct {
	// ref is the image reference.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$')",message="spec.guest.disks[].image.ref must be an image reference such as registry.example.com/vm/data:v1"
	Ref string `json:"ref"`
}

// RootDiskClaim is a root disk kept on a PersistentVolumeClaim.
type RootDiskClaim struct {
	// claimName is the PersistentVolumeClaim's name. With Filesystem, the disk is the file
	// disk.img on the volume; with Block, the volume is the disk. Two VMs never use one claim.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="spec.guest.rootDisk.persistentVolumeClaim.claimName must be a PersistentVolumeClaim name (a DNS subdomain) such as web-root"
	ClaimName string `json:"claimName"`
}

// ClaimUse is what a guest uses one of its claims for.
type ClaimUse string

// Claim uses, each one field of GuestSpec.
const (
	ClaimRootDisk   ClaimUse = "RootDisk"   // rootDisk.persistentVolumeClaim
	ClaimDataDisk   ClaimUse = "DataDisk"   // disks[].persistentVolumeClaim
	ClaimFilesystem ClaimUse = "Filesystem" // filesystems[].persistentVolumeClaim
	ClaimState      ClaimUse = "State"      // stateClaim
)

// GuestClaim is one PersistentVolumeClaim a guest names, and what for (GuestSpec.Claims).
// +kubebuilder:object:generate=false
type GuestClaim struct {
	Use ClaimUse
	// Name is the disk's or the filesystem's name: RootDiskName for the root disk, "" for the
	// state claim.
	Name      string
	ClaimName string
	// ReadOnly: a data disk or filesystem attached readOnly. The root disk and the state claim
	// are always written.
	ReadOnly bool
}

// Claims yields the PersistentVolumeClaims the guest's disks, filesystems and state name: the
// root disk's, the data disks' and the filesystems' in their order, then the state claim. A
// claim named twice is yielded twice (ClaimNames gives each once).
func (g *GuestSpec) Claims() iter.Seq[GuestClaim] {
	return func(yield func(GuestClaim) bool) {
		if c := g.RootDisk.PersistentVolumeClaim; c != nil && !yield(GuestClaim{Use: ClaimRootDisk, Name: RootDiskName, ClaimName: c.ClaimName}) {
			return
		}
		for _, d := range g.Disks {
			if c := d.PersistentVolumeClaim; c != nil && !yield(GuestClaim{Use: ClaimDataDisk, Name: d.Name, ClaimName: c.ClaimName, ReadOnly: c.ReadOnly}) {
				return
			}
		}
		for _, f := range g.Filesystems {
			if c := f.PersistentVolumeClaim; c != nil && !yield(GuestClaim{Use: ClaimFilesystem, Name: f.Name, ClaimName: c.ClaimName, ReadOnly: c.ReadOnly}) {
				return
			}
		}
		if c := g.StateClaim; c != nil {
			yield(GuestClaim{Use: ClaimState, ClaimName: c.ClaimName})
		}
	}
}

// ClaimNames are the PersistentVolumeClaims the VM's disks and filesystems name, root disk
// first, and its state claim last, each once.
func (g *GuestSpec) ClaimNames() []string {
	var names []string
	for c := range g.Claims() {
		names = append(names, c.ClaimName)
	}
	return firstOfEach(names)
}

// firstOfEach is names without repeats, in the order they first appear.
func firstOfEach(names []string) []string {
	var out []string
	for i, n := range names {
		if !slices.Contains(names[:i], n) {
			out = append(out, n)
		}
	}
	return out
}

// WritesClaim says whether the VM may write the claim: a root disk and the state claim always
// do, a data disk or a filesystem unless it is readOnly.
func (g *GuestSpec) WritesClaim(name string) bool {
	for c := range g.Claims() {
		if c.ClaimName == name && !c.ReadOnly {
			return true
		}
	}
	return false
}

// ConfigMapNames are the ConfigMaps the VM's disks and filesystems name, each once.
func (g *GuestSpec) ConfigMapNames() []string {
	var names []string
	for _, d := range g.Disks {
		if c := d.ConfigMap; c != nil {
			names = append(names, c.Name)
		}
	}
	for _, f := range g.Filesystems {
		if c := f.ConfigMap; c != nil {
			names = append(names, c.Name)
		}
	}
	return firstOfEach(names)
}

// SecretNames are the Secrets the VM's disks and filesystems name, each once.
func (g *GuestSpec) SecretNames() []string {
	var names []string
	for _, d := range g.Disks {
		if d.Secret != nil {
			names = append(names, d.Secret.SecretName)
		}
	}
	for _, f := range g.Filesystems {
		if f.Secret != nil {
			names = append(names, f.Secret.SecretName)
		}
	}
	return firstOfEach(names)
}
