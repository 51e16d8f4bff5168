package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/image/ociimage"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/tools/imagebuild/elfdeps"
)

// Where Debian installs QEMU, which is where the runner looks (runner/binaries). The image
// keeps the same paths, so the data, firmware and module directories compiled into Debian's
// QEMU (--firmwarepath, CONFIG_QEMU_MODDIR) stay right.
const (
	qemuSystem    = binaries.QEMU
	qemuImg       = binaries.QEMUImg
	qemuModuleDir = binaries.QEMUModuleDir
	// qemuNBD serves a VM snapshot's disks over NBD (`virtpod-runner disk-target`, which looks
	// for it next to qemu-img first: runner/diskcopy.FindQEMUNBD).
	qemuNBD = "/usr/bin/qemu-nbd"
)

// qemuFirmwareDirs is Debian's firmware search path, in QEMU's order.
var qemuFirmwareDirs = []string{"/usr/share/qemu", "/usr/share/seabios", "/usr/lib/ipxe/qemu"}

// qemuFirmware is what the runner's machine (q35, -nodefaults, direct kernel boot, virtio-blk
// and virtio-net, a standard VGA for the display, see pkg/qemu) loads; the rest of /usr/share/qemu is for other machines and
// architectures. A test boots a guest in the extracted image to prove the set complete.
var qemuFirmware = []struct{ name, pkg string }{
	{"bios-256k.bin", "seabios"},              // SeaBIOS, the q35 BIOS
	{"kvmvapic.bin", "qemu-system-data"},      // x86 TPR-patching option ROM, loaded on every x86 machine
	{"linuxboot_dma.bin", "qemu-system-data"}, // boots -kernel/-initrd over fw_cfg DMA
	{"linuxboot.bin", "qemu-system-data"},     // the same on machine types without fw_cfg DMA
	{"pvh.bin", "qemu-system-data"},           // boots -kernel files that are PVH ELF kernels
	{"efi-virtio.rom", "ipxe-qemu"},           // virtio-net-pci's option ROM, loaded even if never used
	{"vgabios-stdvga.bin", "seabios"},         // the standard VGA's option ROM: a guest with a display (-device VGA)
	{"keymaps/en-us", "qemu-system-data"},     // the VNC server's keymap, which it loads at start
}

// guestFirmware is what guests that boot from their disk run (runner/binaries): SeaBIOS is in
// qemuFirmware already; OVMF's code and its variable store template are not QEMU's own.
var guestFirmware = []string{binaries.OVMFCode, binaries.OVMFVars}

// qemuModules are loadable modules the runner's QEMU needs: Debian builds TCG as a module, and
// -accel tcg (emulated VMs) fails without it. A QEMU built without modules has no module dir.
var qemuModules = []string{binaries.TCGModule}

// qemuPackages names the Debian package of each program qemuLayer takes; the modules are
// qemu-system-x86's, which they must match.
var qemuPackages = map[string]string{
	qemuImg:    "qemu-utils",
	qemuNBD:    "qemu-utils",
	qemuSystem: "qemu-system-x86",
}

// qemuLayer holds qemu-img and qemu-nbd and, with the hypervisor, qemu-system-x86_64 with its modules and
// firmware and virtiofsd where the source has it, plus every shared library and the dynamic loader they need, at their host paths:
// this machine's, or (root set) those of another Debian's root tree on it, such as Debian 13's
// QEMU 10.0 that make qemu-next builds.
func qemuLayer(withHypervisor bool, root string) (*ociimage.Layer, error) {
	l := ociimage.NewLayer("qemu")
	take := l.HostPath
	if root != "" {
		take = func(p string) (string, error) { return l.HostPathIn(root, p) }
	}
	programs := []string{qemuImg, qemuNBD}
	if withHypervisor {
		programs = append(programs, qemuSystem)
		mods, err := existing(root, qemuModuleDir, qemuModules)
		if err != nil {
			return nil, err
		}
		programs = append(programs, mods...)
		// virtiofsd serves virtio-fs shares (runner --filesystem): Debian 13 has it, Debian 12
		// has none, so an image without it refuses a VM with filesystems, in words.
		if hasVirtiofsd(root) {
			programs = append(programs, binaries.Virtiofsd)
		}
	}
	var real []string
	for _, p := range programs {
		r, err := take(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s not found: install Debian's %s (tools/dev/ci/install-deps.sh)", p, qemuPackages[p])
		}
		if err != nil {
			return nil, err
		}
		real = append(real, r)
	}
	deps, err := elfdeps.Resolver{Root: root}.Resolve(real...)
	if err != nil {
		return nil, err
	}
	for _, p := range append(deps.Interpreters, deps.Libraries...) {
		if _, err := take(p); err != nil {
			return nil, err
		}
	}
	if !withHypervisor {
		return l, nil
	}
	for _, fw := range qemuFirmware {
		p, err := findFirmware(root, fw.name)
		if err != nil {
			return nil, fmt.Errorf("QEMU firmware %s: %w: install Debian's %s", fw.name, err, fw.pkg)
		}
		if _, err := take(p); err != nil {
			return nil, err
		}
	}
	for _, p := range guestFirmware {
		if _, err := take(p); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("guest firmware %s not found: install Debian's %s (tools/dev/ci/install-deps.sh)", p, binaries.FirmwarePackages[p])
		} else if err != nil {
			return nil, err
		}
	}
	return l, nil
}

// findFirmware returns the file QEMU would load for name: the first firmware dir that has it
// (under root, "" for this machine).
func findFirmware(root, name string) (string, error) {
	for _, dir := range qemuFirmwareDirs {
		p := path.Join(dir, name)
		if _, err := os.Stat(path.Join("/", root, p)); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("not in %v", qemuFirmwareDirs)
}

// existing returns the modules present in dir (under root); none when QEMU has no module dir
// at all.
func existing(root, dir string, names []string) ([]string, error) {
	if _, err := os.Stat(path.Join("/", root, dir)); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var out []string
	for _, n := range names {
		p := path.Join(dir, n)
		_, err := os.Stat(path.Join("/", root, p))
		if err != nil && root != "" && errors.Is(err, fs.ErrNotExist) {
			// Debian 13's QEMU has TCG built in and no accel-tcg module; the image test boots
			// an emulated guest in the image, which would fail without either.
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("QEMU module %s: %w: install Debian's %s (its modules must match the binary)", p, err, qemuPackages[qemuSystem])
		}
		out = append(out, p)
	}
	return out, nil
}

// hasVirtiofsd says whether the QEMU source (root, or this machine) has virtiofsd.
func hasVirtiofsd(root string) bool {
	_, err := os.Stat(path.Join("/", root, binaries.Virtiofsd))
	return err == nil
}

// LabelRunnerFeatures is the runner image's label listing its runner features (a ProviderClass's
// spec.runnerFeatures: what the image can do that another may not), comma-separated.
const LabelRunnerFeatures = "vm.virtpod.io/runner-features"

// runnerFeatures are the features of a runner image with QEMU from root.
func runnerFeatures(withHypervisor bool, root string) []vmv1.RunnerFeature {
	var fs []vmv1.RunnerFeature
	if withHypervisor && hasVirtiofsd(root) {
		fs = append(fs, vmv1.RunnerFeatureVirtioFS)
	}
	return fs
}

// withFeatures labels img with its runner features.
func withFeatures(img v1.Image, fs []vmv1.RunnerFeature) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg := cf.Config.DeepCopy()
	if cfg.Labels == nil {
		cfg.Labels = map[string]string{}
	}
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = string(f)
	}
	cfg.Labels[LabelRunnerFeatures] = strings.Join(names, ",")
	return mutate.Config(img, *cfg)
}
