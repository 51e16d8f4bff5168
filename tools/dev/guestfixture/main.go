// Command guestfixture builds the small Linux guest that the runner tests and the boot benchmark
// boot: Debian's cloud kernel, a busybox initramfs that loads the virtio modules, and an ext4
// root disk whose init configures the network from ip=, serves HTTP on port 80, powers off on
// the ACPI power button, reports a cloud-init seed disk (VIRTPOD-GUEST-SEED) when it has one and
// its data disks by serial (VIRTPOD-GUEST-DISK, files/disk-report), onlines hot-added CPUs and
// reports its CPUs and memory on every change (VIRTPOD-GUEST-SIZE, files/hotplug), and the disks
// attached and detached while it runs (VIRTPOD-GUEST-DISK-ADDED, -REMOVED), mounts the
// virtio-fs shares virtpod.fs=<tag>:<dir> names (VIRTPOD-GUEST-FS), takes an IPv6 address by
// DHCPv6 (ISC dhclient) when a router advertises one (VIRTPOD-GUEST-IPV6), runs
// qemu-guest-agent (this host's, with the libraries it links) on its channel, prints
// VIRTPOD-GUEST-READY on the console, then runs a root shell there.
//
// The output is laid out like a VM image (boot/vmlinuz, boot/initrd.img, disk/root.img) and is
// cached outside git, in $VIRTPOD_CACHE/guest (default ~/.cache/virtpod/guest).
package main

import (
	"bytes"
	"compress/gzip"
	"embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/virtpod/virtpod/tools/dev/devcache"
)

//go:embed files
var files embed.FS

// Marker is what the guest prints once its network and HTTP server are up.
const Marker = "VIRTPOD-GUEST-READY"

// wantedModules are the modules the cloud kernel does not build in but the guest needs: disk,
// network, the ACPI power button (button) delivered through an input device (evdev), ISO 9660
// (isofs) to read a cloud-init seed disk, virtio_mem for hot-added memory, virtio_console for
// the guest agent's virtio-serial channel, and virtiofs (with fuse) for shared filesystems.
var wantedModules = []string{"virtio_pci", "virtio_blk", "virtio_net", "button", "evdev", "isofs", "virtio_mem", "virtio_console", "virtiofs"}

const (
	metaPackage = "linux-image-cloud-amd64"
	busyboxPath = "/bin/busybox"
	agentPath   = "/usr/sbin/qemu-ga"
	dhclient    = "/sbin/dhclient"
	rootDiskMiB = 64
)

// fixtureVersion changes whenever the guest's files change, so a cached fixture is rebuilt.
const fixtureVersion = 20

// manifest records what was built, so a rerun can tell the fixture is complete and current.
type manifest struct {
	Version       int      `json:"version"`
	KernelPackage string   `json:"kernelPackage"`
	KernelVersion string   `json:"kernelVersion"`
	Modules       []string `json:"modules"`
	Marker        string   `json:"marker"`
}

func main() {
	out := flag.String("out", defaultOut(), "directory to build the fixture in")
	force := flag.Bool("force", false, "rebuild even when the fixture is complete")
	flag.Parse()
	if err := build(*out, *force); err != nil {
		fmt.Fprintln(os.Stderr, "guestfixture:", err)
		os.Exit(1)
	}
}

func defaultOut() string { return devcache.Dir("guest") }

func build(out string, force bool) error {
	manifestPath := filepath.Join(out, "fixture.json")
	if current, found := devcache.Current(manifestPath, fixtureVersion); current && !force {
		fmt.Printf("guest fixture up to date in %s\n", out)
		return nil
	} else if found && !force {
		fmt.Printf("guest fixture in %s is not version %d: rebuilding\n", out, fixtureVersion)
	}
	for _, tool := range []string{"apt-get", "apt-cache", "dpkg", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: run tools/dev/ci/install-deps.sh (Debian) first", tool)
		}
	}
	if _, err := os.Stat(busyboxPath); err != nil {
		return fmt.Errorf("%s not found: install busybox-static (tools/dev/ci/install-deps.sh)", busyboxPath)
	}
	if _, err := os.Stat(agentPath); err != nil {
		return fmt.Errorf("%s not found: install qemu-guest-agent (tools/dev/ci/install-deps.sh)", agentPath)
	}
	if _, err := os.Stat(dhclient); err != nil {
		return fmt.Errorf("%s not found: install isc-dhcp-client (tools/dev/ci/install-deps.sh)", dhclient)
	}
	work, err := os.MkdirTemp("", "guestfixture-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	// apt-get download drops privileges to _apt when that user can write the directory.
	_ = os.Chmod(work, 0o755)
	dl := filepath.Join(work, "download")
	if err := os.Mkdir(dl, 0o777); err != nil {
		return err
	}
	_ = os.Chmod(dl, 0o777) // past the umask

	pkg, err := kernelPackage()
	if err != nil {
		return err
	}
	fmt.Printf("downloading %s\n", pkg)
	if err := run(dl, "apt-get", "download", "-q", pkg); err != nil {
		return err
	}
	debs, _ := filepath.Glob(filepath.Join(dl, "*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("apt-get download %s left %d .deb files, want 1", pkg, len(debs))
	}
	pkgRoot := filepath.Join(work, "pkg")
	if err := run(work, "dpkg", "-x", debs[0], pkgRoot); err != nil {
		return err
	}
	kernels, _ := filepath.Glob(filepath.Join(pkgRoot, "boot", "vmlinuz-*"))
	if len(kernels) != 1 {
		return fmt.Errorf("%s holds %d kernels, want 1", pkg, len(kernels))
	}
	version := strings.TrimPrefix(filepath.Base(kernels[0]), "vmlinuz-")

	stage := filepath.Join(work, "out")
	for _, d := range []string{"boot", "disk"} {
		if err := os.MkdirAll(filepath.Join(stage, d), 0o755); err != nil {
			return err
		}
	}
	if err := copyFile(kernels[0], filepath.Join(stage, "boot", "vmlinuz"), 0o644); err != nil {
		return err
	}
	mods, err := writeInitramfs(filepath.Join(stage, "boot", "initrd.img"), filepath.Join(pkgRoot, "lib", "modules", version))
	if err != nil {
		return err
	}
	if err := writeRootDisk(work, filepath.Join(stage, "disk", "root.img")); err != nil {
		return err
	}
	m, _ := json.MarshalIndent(manifest{Version: fixtureVersion, KernelPackage: pkg, KernelVersion: version, Modules: mods, Marker: Marker}, "", "  ")
	if err := os.WriteFile(filepath.Join(stage, "fixture.json"), append(m, '\n'), 0o644); err != nil {
		return err
	}
	// Replace the whole directory at once so a half-built fixture is never taken as complete.
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := os.Rename(stage, out); err != nil {
		// Across file systems: fall back to copying through cp -a's equivalent.
		if err := run("", "cp", "-a", stage, out); err != nil {
			return err
		}
	}
	fmt.Printf("guest fixture built in %s\n%s", out, m)
	return nil
}

// kernelPackage resolves the cloud kernel metapackage to the real image package it depends on,
// updating the package lists once if apt knows nothing yet (a fresh machine).
func kernelPackage() (string, error) {
	show := func() (string, error) {
		b, err := exec.Command("apt-cache", "show", "--no-all-versions", metaPackage).Output()
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if deps, ok := strings.CutPrefix(line, "Depends:"); ok {
				for _, d := range strings.Split(deps, ",") {
					name, _, _ := strings.Cut(strings.TrimSpace(d), " ")
					if strings.HasPrefix(name, "linux-image-") {
						return name, nil
					}
				}
			}
		}
		return "", fmt.Errorf("%s has no linux-image-* dependency", metaPackage)
	}
	if p, err := show(); err == nil {
		return p, nil
	}
	fmt.Println("apt knows no", metaPackage, "yet: running apt-get update")
	if err := run("", "apt-get", "update", "-q"); err != nil {
		return "", err
	}
	p, err := show()
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", metaPackage, err)
	}
	return p, nil
}

func writeInitramfs(path, moduleDir string) ([]string, error) {
	idx, err := newModuleIndex(moduleDir)
	if err != nil {
		return nil, err
	}
	mods, err := idx.order(wantedModules)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	c := &cpioWriter{w: gz}
	for _, d := range []string{"bin", "dev", "proc", "sys", "newroot", "lib", "lib/modules"} {
		c.Dir(d)
	}
	// The kernel opens /dev/console for init's stdio before devtmpfs is mounted.
	c.CharDev("dev/console", 0o600, 5, 1)
	bb, err := os.ReadFile(busyboxPath)
	if err != nil {
		return nil, err
	}
	c.File("bin/busybox", 0o755, bb)
	c.Symlink("bin/sh", "busybox")
	init, _ := files.ReadFile("files/initramfs-init")
	c.File("init", 0o755, init)
	c.File("modules.order", 0o644, []byte(strings.Join(mods, "\n")+"\n"))
	for _, m := range mods {
		b, err := os.ReadFile(idx.paths[m])
		if err != nil {
			return nil, err
		}
		c.File("lib/modules/"+m+".ko", 0o644, b)
	}
	if err := c.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return mods, os.WriteFile(path, buf.Bytes(), 0o644)
}

// writeRootDisk lays out the root tree in a directory and turns it into an ext4 image with
// mkfs.ext4 -d, which needs no root and no loop device.
func writeRootDisk(work, img string) error {
	root := filepath.Join(work, "rootfs")
	for _, d := range []string{"bin", "sbin", "usr/sbin", "dev", "proc", "sys", "tmp", "run", "www", "etc/acpi/PWRF", "etc/virtpod"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := copyFile(busyboxPath, filepath.Join(root, "bin", "busybox"), 0o755); err != nil {
		return err
	}
	if err := os.Symlink("busybox", filepath.Join(root, "bin", "sh")); err != nil {
		return err
	}
	for src, dst := range map[string]string{
		"files/rootfs-init":     "sbin/init",
		"files/poweroff":        "etc/acpi/PWRF/00000080",
		"files/disk-report":     "etc/virtpod/disk-report",
		"files/hotplug":         "etc/virtpod/hotplug",
		"files/size-report":     "etc/virtpod/size-report",
		"files/shutdown":        "sbin/shutdown",
		"files/os-release":      "etc/os-release",
		"files/dhclient-script": "etc/virtpod/dhclient-script",
	} {
		b, _ := files.ReadFile(src)
		if err := os.WriteFile(filepath.Join(root, dst), b, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "resolv.conf"), nil, 0o644); err != nil {
		return err
	}
	for _, p := range []string{agentPath, dhclient} {
		if err := copyProgram(p, root); err != nil {
			return err
		}
	}
	return run(work, "mkfs.ext4", "-q", "-F", "-L", "virtpod-guest", "-d", root, img, fmt.Sprintf("%dM", rootDiskMiB))
}

func run(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

func copyFile(src, dst string, perm os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.WriteFile(dst, b, perm); err != nil {
		return errors.Join(fmt.Errorf("write %s", dst), err)
	}
	return nil
}
