// Package boot prepares what a guest boots from, in the runner's neutral words
// (hypervisor.Machine): its kernel or firmware, its root disk (an overlay on the image's disk, or
// a disk on a claim, filled once from the image or received by a migration), its data disks and
// its cloud-init seed. It starts nothing: the runner hands what it prepared to a driver.
package boot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/disk/diskfile"
	"github.com/virtpod/virtpod/pkg/disk/diskimage"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/hypervisor"
	"github.com/virtpod/virtpod/runner/status"
)

// OverlayName is the root disk's qcow2 overlay in the state directory.
const OverlayName = "root.qcow2"

// Files are the guest's boot: its kernel (and an initrd, when the file is there), or the
// firmware that boots its root disk. The command line is the runner's to complete (Cmdline),
// once the network is known.
func Files(cfg runnerconfig.Config, log *zap.Logger) (hypervisor.Boot, error) {
	b := hypervisor.Boot{Kernel: cfg.Kernel, Initrd: cfg.Initrd}
	if cfg.Kernel == "" {
		fw, err := Firmware(cfg)
		if err != nil {
			return b, fmt.Errorf("--firmware=%s: %w", cfg.Firmware, err)
		}
		b.Firmware, b.FirmwareCode, b.FirmwareVars = fw.Firmware, fw.FirmwareCode, fw.FirmwareVars
		log.Info("booting the root disk through firmware", zap.String("firmware", b.Firmware), zap.String("code", b.FirmwareCode), zap.String("vars", b.FirmwareVars))
	} else if _, err := os.Stat(cfg.Kernel); err != nil {
		return b, fmt.Errorf("--kernel: %w", err)
	}
	if b.Initrd != "" {
		if _, err := os.Stat(b.Initrd); err != nil {
			log.Info("no initrd; booting without one", zap.String("initrd", b.Initrd))
			b.Initrd = ""
		}
	}
	return b, nil
}

// ResolveRootDisk makes cfg's --root-disk the disk file itself: it names the disk, or the VM
// image's /disk, which holds it as root.img or as a containerDisk's one disk file.
func ResolveRootDisk(cfg *runnerconfig.Config) error {
	if cfg.RootDisk == "" {
		return nil
	}
	base, _, err := diskfile.Resolve(cfg.RootDisk)
	if err != nil {
		return err
	}
	cfg.RootDisk = base
	return nil
}

// RootDisk readies the root disk (after ResolveRootDisk): a volume kept on a claim, or an
// overlay in the state directory on the image's disk; with a root volume the image is what
// fills the volume once.
func RootDisk(ctx context.Context, cfg runnerconfig.Config, qemuImg string, board *status.Board, log *zap.Logger) (hypervisor.Disk, error) {
	if cfg.RootVolume != nil {
		return rootVolume(ctx, cfg, qemuImg, board, log)
	}
	overlay, err := diskimage.CreateOverlay(ctx, qemuImg, cfg.RootDisk, filepath.Join(cfg.StateDir, OverlayName), cfg.DiskSizeMiB)
	if err != nil {
		return hypervisor.Disk{}, err
	}
	log.Info("root disk", zap.String("overlay", overlay.Path), zap.String("base", overlay.Base), zap.String("baseFormat", overlay.BaseFormat), zap.Int64("sizeBytes", overlay.SizeBytes), zap.Bool("reused", overlay.Reused))
	return hypervisor.Disk{Path: overlay.Path, Format: overlay.Format, Direct: DirectIn(cfg.StateDir)}, nil
}

// Cmdline completes the VM's kernel arguments with what the runner's wiring requires:
// the serial console the runner reads, the virtio root disk, and the pod IP; with hotplugged
// memory, that the kernel onlines it itself, movable while the ratio to boot memory allows, so
// it can be unplugged again (docs/runner.md).
func Cmdline(user, ipArg string, hotplugMemory bool) string {
	has := func(key string) bool {
		for _, f := range strings.Fields(user) {
			if f == key || strings.HasPrefix(f, key+"=") {
				return true
			}
		}
		return false
	}
	var parts []string
	if !has("console") {
		parts = append(parts, "console=ttyS0")
	}
	if !has("root") {
		parts = append(parts, "root=/dev/vda")
	}
	// The kernel's check of the IO-APIC timer counts ticks in a wall-clock window; a guest whose
	// vCPU the host starves (TCG on busy cores) misses it and panics ("IO-APIC + timer doesn't
	// work!"). A hypervisor's timer is not the broken hardware the check is for.
	if !has("no_timer_check") {
		parts = append(parts, "no_timer_check")
	}
	if strings.TrimSpace(user) != "" {
		parts = append(parts, strings.TrimSpace(user))
	}
	if ipArg != "" && !has("ip") {
		parts = append(parts, ipArg)
	}
	if hotplugMemory && !has("memhp_default_state") {
		parts = append(parts, "memhp_default_state=online")
		if !has("memory_hotplug.online_policy") {
			parts = append(parts, "memory_hotplug.online_policy=auto-movable")
		}
	}
	return strings.Join(parts, " ")
}
