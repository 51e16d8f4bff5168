package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestNodeFlavor: the node image is the Debian guest's packages and files plus the node's, its
// binaries copied into /usr/bin before its units are enabled, on a larger disk.
func TestNodeFlavor(t *testing.T) {
	dir := t.TempDir()
	b := nodeBinaries{kubernetesVersion: "v1.37.2", kubelet: filepath.Join(dir, "kubelet"), kubeadm: filepath.Join(dir, "kubeadm"), containerdDir: dir}
	f := nodeFlavor(b)
	for _, p := range append(append([]string{}, packages...), "runc", "containernetworking-plugins", "iptables", "conntrack") {
		if !slices.Contains(f.packages, p) {
			t.Errorf("package %s missing from %v", p, f.packages)
		}
	}
	args := strings.Join(mmdebstrapArgs("/root", "/overlay", f), "\n")
	copyIn := strings.Index(args, "--customize-hook=copy-in "+b.kubelet+" "+b.kubeadm+" "+filepath.Join(dir, "containerd")+" "+filepath.Join(dir, "containerd-shim-runc-v2")+" /usr/bin")
	enable := strings.Index(args, "systemctl enable systemd-networkd.service systemd-resolved.service virtpod-ssh-hostkeys.service containerd.service kubelet.service")
	if copyIn < 0 || enable < 0 || copyIn > enable || strings.Index(args, "sync-in /overlay /") > copyIn {
		t.Errorf("want the overlay, then the binaries, then the units enabled:\n%s", args)
	}
	if g := strings.Join(mmdebstrapArgs("/root", "/overlay", guestFlavor), "\n"); strings.Contains(g, "copy-in") || strings.Contains(g, "kubelet") {
		t.Errorf("the Debian guest got the node's parts:\n%s", g)
	}
	if f.diskMiB <= guestFlavor.diskMiB {
		t.Errorf("node disk %d MiB, not larger than the guest's %d", f.diskMiB, guestFlavor.diskMiB)
	}

	// Both trees land in the overlay; the node's own files beside the guest's.
	overlay := filepath.Join(dir, "overlay")
	if err := writeOverlay(overlay, newLayout(f.diskMiB), f.files); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"etc/cloud/cloud.cfg.d/90-virtpod.cfg", "etc/containerd/config.toml", "etc/systemd/system/kubelet.service.d/10-kubeadm.conf", "etc/fstab"} {
		if _, err := os.Stat(filepath.Join(overlay, p)); err != nil {
			t.Error(err)
		}
	}
}

// TestNodeBinariesCheck: every binary must exist and be executable, and the version be given.
func TestNodeBinariesCheck(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"kubelet", "kubeadm", "containerd", "containerd-shim-runc-v2"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b := nodeBinaries{kubernetesVersion: "v1.37.2", kubelet: filepath.Join(dir, "kubelet"), kubeadm: filepath.Join(dir, "kubeadm"), containerdDir: dir}
	if err := b.check(); err != nil {
		t.Fatal(err)
	}
	missing := b
	missing.kubeadm = filepath.Join(dir, "nothing")
	if err := missing.check(); err == nil || !strings.Contains(err.Error(), "nothing") {
		t.Errorf("a missing kubeadm: %v", err)
	}
	noVersion := b
	noVersion.kubernetesVersion = ""
	if err := noVersion.check(); err == nil || !strings.Contains(err.Error(), "-kubernetes-version") {
		t.Errorf("no version: %v", err)
	}
}

// TestBuiltFor: a cached image is current only for its flavor and Kubernetes version; the Debian
// guest's manifests from before flavors existed still count as the guest's.
func TestBuiltFor(t *testing.T) {
	node := nodeFlavor(nodeBinaries{kubernetesVersion: "v1.37.2"})
	for _, c := range []struct {
		m     manifest
		f     flavor
		built bool
	}{
		{manifest{Flavor: node.name, KubernetesVersion: "v1.37.2"}, node, true},
		{manifest{Flavor: node.name, KubernetesVersion: "v1.36.0"}, node, false},
		{manifest{Flavor: guestFlavor.name}, node, false},
		{manifest{}, guestFlavor, true},
		{manifest{}, node, false},
		{manifest{Flavor: node.name, KubernetesVersion: "v1.37.2"}, guestFlavor, false},
	} {
		p := filepath.Join(t.TempDir(), "image.json")
		b, _ := json.Marshal(c.m)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if got := builtFor(p, c.f); got != c.built {
			t.Errorf("manifest %+v for %s: built %v, want %v", c.m, c.f.name, got, c.built)
		}
	}
}
