package main

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// nodeFiles are the Kubernetes node image's own files: the containerd and kubelet units (with
// kubeadm's drop-in), containerd's configuration, a CNI bridge, the kernel modules and sysctls a
// kubeadm node needs.
//
//go:embed all:nodefiles
var nodeFiles embed.FS

// nodeImageVersion changes whenever what the node image holds changes, beside its binaries'
// versions, which its manifest records.
const nodeImageVersion = 3

// nodePackages are what a kubeadm node needs beyond the Debian guest: runc and the CNI plugins
// (the versions the local cluster runs, from the same Debian packages), the programs kubeadm's
// preflight checks and the CNI bridge call, and growpart and resize2fs, with which cloud-init
// grows the root file system to a worker's larger disk.
var nodePackages = []string{"runc", "containernetworking-plugins", "iptables", "conntrack", "ethtool", "socat", "kmod",
	"cloud-guest-utils", "e2fsprogs"}

// nodeDiskMiB leaves room beside the Debian guest for about 400 MiB of binaries and the images
// the kubelet pulls (sparse: the file takes the space of what it holds).
const nodeDiskMiB = 4096

// nodeBinaries are the programs copied into the node image at /usr/bin, by name, from where
// virtpod builds them.
type nodeBinaries struct {
	kubernetesVersion string
	kubelet, kubeadm  string
	containerdDir     string // containerd and containerd-shim-runc-v2
}

func (b nodeBinaries) paths() []string {
	return []string{b.kubelet, b.kubeadm, filepath.Join(b.containerdDir, "containerd"), filepath.Join(b.containerdDir, "containerd-shim-runc-v2")}
}

func (b nodeBinaries) check() error {
	if b.kubernetesVersion == "" {
		return fmt.Errorf("-kubernetes-version is required with -node")
	}
	for _, p := range b.paths() {
		if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
			return fmt.Errorf("%s: not an executable (make k8s-binaries containerd builds it): %v", p, err)
		}
	}
	return nil
}

// nodeFlavor is the Kubernetes node image: the Debian guest plus containerd, runc, the CNI
// plugins, kubelet and kubeadm, the equivalent of Cluster API's image-builder images.
func nodeFlavor(b nodeBinaries) flavor {
	hooks := []string{"copy-in " + strings.Join(b.paths(), " ") + " /usr/bin"}
	return flavor{
		name: "kubernetes node", cacheDir: "node-image", version: nodeImageVersion, kubernetesVersion: b.kubernetesVersion,
		packages: append(append([]string{}, packages...), nodePackages...),
		files:    []embed.FS{files, nodeFiles}, hooks: hooks,
		enable:  []string{"containerd.service", "kubelet.service"},
		diskMiB: nodeDiskMiB,
	}
}
