// Command debianguest builds a Debian cloud guest from Debian's packages, as a bootable disk image
// of the kind people publish: a GPT disk with an EFI system partition (systemd-boot, the kernel and
// its initramfs), a BIOS boot partition (GRUB's core image, for SeaBIOS), and an ext4 root with
// systemd, udev, cloud-init, openssh-server, qemu-guest-agent and busybox. The network comes up by DHCP on the first
// NIC (systemd-networkd, or cloud-init's own configuration when it writes one); SSH host keys are
// made on first boot.
//
// The root tree is made by mmdebstrap (no root filesystem download, no chroot left behind), the
// partition table and the FAT file system by go-diskfs, the ext4 file system by mkfs.ext4 -d
// written straight into the partition: no loop device, no mount.
//
// With -node it builds the Kubernetes node image instead (node.go): the same guest plus
// containerd, runc, the CNI plugins, kubelet and kubeadm, for Cluster API workers.
//
// The output is laid out like a VM image (disk/root.img) and cached outside git, in
// $VIRTPOD_CACHE/debian-guest (or node-image); a changed version rebuilds it.
package main

import (
	"crypto/rand"
	"embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/virtpod/virtpod/tools/dev/devcache"
)

//go:embed all:files
var files embed.FS

// imageVersion changes whenever what the image holds changes, so a cached image is rebuilt.
const imageVersion = 2

// suite is the Debian release the guest runs.
const suite = "bookworm"

// packages make a cloud guest: the cloud kernel with an initramfs, systemd as init with udev,
// networkd and resolved, cloud-init, sshd, qemu-guest-agent (started by udev when its channel
// appears), busybox (a small HTTP server for tests), and the boot loaders' files (systemd-boot's
// EFI binary, GRUB's BIOS modules).
var packages = []string{
	"linux-image-cloud-amd64", "initramfs-tools",
	"systemd", "systemd-sysv", "systemd-resolved", "udev", "dbus",
	"cloud-init", "openssh-server", "sudo", "busybox", "qemu-guest-agent",
	"systemd-boot-efi", "grub-pc-bin",
}

// excluded are paths dpkg leaves out of the image: documentation and translations.
var excluded = []string{"/usr/share/man/*", "/usr/share/doc/*", "/usr/share/info/*", "/usr/share/locale/*", "/usr/share/lintian/*"}

// manifest records what was built, so a rerun can tell the image is complete and current.
type manifest struct {
	Version           int     `json:"version"`
	Flavor            string  `json:"flavor"`
	KubernetesVersion string  `json:"kubernetesVersion,omitempty"`
	Suite             string  `json:"suite"`
	KernelVersion     string  `json:"kernelVersion"`
	RootPartUUID      string  `json:"rootPartUUID"`
	DiskBytes         int64   `json:"diskBytes"`
	BuildSeconds      float64 `json:"buildSeconds"`
	Boot              string  `json:"boot"`
}

// flavor is what one image holds beyond Debian's minimal system.
type flavor struct {
	name              string
	cacheDir          string // the default output, under $VIRTPOD_CACHE
	version           int    // the manifest's version: a change rebuilds a cached image
	kubernetesVersion string // the node image's kubelet and kubeadm, also checked in the manifest
	packages          []string
	files             []embed.FS // each with one top directory, laid over the root tree
	hooks             []string   // more mmdebstrap customize hooks, before the services are enabled
	enable            []string   // systemd units enabled beside networkd, resolved and the host keys'
	diskMiB           int64
}

// guestFlavor is the Debian cloud guest.
var guestFlavor = flavor{name: "debian guest", cacheDir: "debian-guest", version: imageVersion, packages: packages, files: []embed.FS{files}, diskMiB: diskMiB}

func main() {
	out := flag.String("out", "", "directory to build the image in (default $VIRTPOD_CACHE/debian-guest, or node-image with -node)")
	force := flag.Bool("force", false, "rebuild even when the image is complete")
	node := flag.Bool("node", false, "build the Kubernetes node image: the guest plus containerd, runc, the CNI plugins, kubelet and kubeadm")
	var b nodeBinaries
	flag.StringVar(&b.kubernetesVersion, "kubernetes-version", "", "with -node: the kubelet's and kubeadm's version, recorded in the manifest")
	flag.StringVar(&b.kubelet, "kubelet", "", "with -node: the kubelet binary")
	flag.StringVar(&b.kubeadm, "kubeadm", "", "with -node: the kubeadm binary")
	flag.StringVar(&b.containerdDir, "containerd-bin", "", "with -node: the folder with containerd and containerd-shim-runc-v2")
	flag.Parse()
	f := guestFlavor
	if *node {
		if err := b.check(); err != nil {
			fmt.Fprintln(os.Stderr, "debianguest:", err)
			os.Exit(2)
		}
		f = nodeFlavor(b)
	}
	if *out == "" {
		*out = devcache.Dir(f.cacheDir)
	}
	if err := build(*out, *force, f); err != nil {
		fmt.Fprintln(os.Stderr, "debianguest:", err)
		os.Exit(1)
	}
}

func build(out string, force bool, f flavor) error {
	start := time.Now()
	manifestPath := filepath.Join(out, "image.json")
	if current, found := devcache.Current(manifestPath, f.version); current && !force && builtFor(manifestPath, f) {
		fmt.Printf("%s up to date in %s\n", f.name, out)
		return nil
	} else if found && !force {
		fmt.Printf("%s in %s is not version %d (Kubernetes %q): rebuilding\n", f.name, out, f.version, f.kubernetesVersion)
	}
	for _, tool := range []string{"mmdebstrap", "mkfs.ext4", "e2fsck"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: run tools/dev/ci/install-deps.sh (Debian) first", tool)
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("mmdebstrap needs root to build a root tree that keeps its owners and devices")
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	// The work directory sits beside the output, so the finished image moves in by rename.
	work, err := os.MkdirTemp(filepath.Dir(out), ".debianguest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	l := newLayout(f.diskMiB)
	overlay := filepath.Join(work, "overlay")
	if err := writeOverlay(overlay, l, f.files); err != nil {
		return err
	}
	root := filepath.Join(work, "root")
	fmt.Printf("mmdebstrap %s with %s\n", suite, strings.Join(f.packages, ", "))
	if err := run("mmdebstrap", mmdebstrapArgs(root, overlay, f)...); err != nil {
		return err
	}
	kernel, initrd, version, err := findKernel(root)
	if err != nil {
		return err
	}
	stage := filepath.Join(work, "out")
	if err := os.MkdirAll(filepath.Join(stage, "disk"), 0o755); err != nil {
		return err
	}
	img := filepath.Join(stage, "disk", "root.img")
	if err := writeDisk(img, root, kernel, initrd, l); err != nil {
		return err
	}
	m := manifest{Version: f.version, Flavor: f.name, KubernetesVersion: f.kubernetesVersion, Suite: suite, KernelVersion: version, RootPartUUID: l.rootPartUUID,
		DiskBytes: l.diskBytes(), BuildSeconds: time.Since(start).Round(time.Second).Seconds(), Boot: "uefi (systemd-boot), bios (GRUB)"}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(stage, "image.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	// Replace the whole directory at once so a half-built image is never taken as complete.
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := os.Rename(stage, out); err != nil {
		return err
	}
	fmt.Printf("%s built in %s (%s)\n%s", f.name, out, time.Since(start).Round(time.Second), b)
	return nil
}

// builtFor says whether the manifest is of f's flavor and Kubernetes version.
func builtFor(manifestPath string, f flavor) bool {
	b, err := os.ReadFile(manifestPath)
	if err != nil {
		return false
	}
	var m manifest
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	return (m.Flavor == f.name || m.Flavor == "" && f.name == guestFlavor.name) && m.KubernetesVersion == f.kubernetesVersion
}

// mmdebstrapArgs builds the root tree in root: the packages, the image's own files from overlay,
// its services enabled, and no SSH host keys.
func mmdebstrapArgs(root, overlay string, f flavor) []string {
	args := []string{"--variant=apt", "--components=main", "--include=" + strings.Join(f.packages, ",")}
	for _, p := range excluded {
		args = append(args, "--dpkgopt=path-exclude="+p)
	}
	args = append(args,
		"--dpkgopt=path-include=/usr/share/doc/*/copyright",
		"--customize-hook=sync-in "+overlay+" /")
	for _, h := range f.hooks {
		args = append(args, "--customize-hook="+h)
	}
	units := append([]string{"systemd-networkd.service", "systemd-resolved.service", "virtpod-ssh-hostkeys.service"}, f.enable...)
	args = append(args,
		`--customize-hook=chroot "$1" systemctl enable `+strings.Join(units, " "),
		`--customize-hook=rm -f "$1"/etc/ssh/ssh_host_*`,
		// systemd makes a machine ID on the first boot: each VM has its own.
		`--customize-hook=rm -f "$1"/etc/machine-id "$1"/var/lib/dbus/machine-id; : > "$1"/etc/machine-id`,
		suite, root,
	)
	return args
}

// writeOverlay lays out the image's own files (embedded under files/) and the ones that name the
// root partition.
func writeOverlay(dir string, l layout, trees []embed.FS) error {
	for _, tree := range trees {
		top, err := fs.ReadDir(tree, ".")
		if err != nil || len(top) != 1 {
			return fmt.Errorf("an embedded tree has %d top directories, want 1 (%v)", len(top), err)
		}
		prefix := top[0].Name()
		err = fs.WalkDir(tree, prefix, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			dst := filepath.Join(dir, strings.TrimPrefix(p, prefix))
			if d.IsDir() {
				return os.MkdirAll(dst, 0o755)
			}
			b, err := tree.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(dst, b, 0o644)
		})
		if err != nil {
			return err
		}
	}
	fstab := fmt.Sprintf("PARTUUID=%s / ext4 rw,errors=remount-ro 0 1\n", l.rootPartUUID)
	return os.WriteFile(filepath.Join(dir, "etc", "fstab"), []byte(fstab), 0o644)
}

// findKernel returns the kernel and initramfs the cloud kernel package installed.
func findKernel(root string) (kernel, initrd, version string, err error) {
	kernels, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if len(kernels) != 1 {
		return "", "", "", fmt.Errorf("the root tree holds %d kernels, want 1", len(kernels))
	}
	version = strings.TrimPrefix(filepath.Base(kernels[0]), "vmlinuz-")
	initrd = filepath.Join(root, "boot", "initrd.img-"+version)
	if _, err := os.Stat(initrd); err != nil {
		return "", "", "", fmt.Errorf("no initramfs for %s: %w", version, err)
	}
	return kernels[0], initrd, version, nil
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}
