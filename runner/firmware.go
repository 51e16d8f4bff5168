package runner

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/virtpod/virtpod/pkg/qemu"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/binaries"
)

// uefiVarsName is the guest's copy of OVMF's variable store in the state directory: boot
// entries the guest writes (its bootloader's) survive a restart in the same pod.
const uefiVarsName = "uefi-vars.fd"

// firmwareFiles are what a guest without a kernel boots through.
type firmwareFiles struct {
	kind string // runnerconfig.FirmwareBIOS or FirmwareUEFI
	code string // SeaBIOS, or the UEFI code (read-only)
	vars string // the guest's UEFI variable store; "" for bios and cloud-hypervisor
}

// prepareFirmware finds the firmware for cfg and, for OVMF, copies its variable store template
// into the state directory once; a copy left by an earlier container of the pod is kept.
func prepareFirmware(cfg runnerconfig.Config) (firmwareFiles, error) {
	fw := firmwareFiles{kind: cfg.Firmware}
	switch {
	case cfg.Provider == runnerconfig.ProviderCloudHypervisor && cfg.Firmware == runnerconfig.FirmwareBIOS:
		return fw, errors.New("--firmware=bios: cloud-hypervisor boots disks through UEFI only; use --firmware=uefi")
	case cfg.Provider == runnerconfig.ProviderCloudHypervisor:
		fw.code = binaries.CloudHypervisorFirmware
	case cfg.Firmware == runnerconfig.FirmwareBIOS:
		fw.code = binaries.SeaBIOS
	default:
		fw.code = binaries.OVMFCode
	}
	if err := needFirmwareFile(fw.code); err != nil {
		return fw, err
	}
	if cfg.Provider != runnerconfig.ProviderQEMU || cfg.Firmware != runnerconfig.FirmwareUEFI {
		return fw, nil
	}
	fw.vars = filepath.Join(cfg.StateDir, uefiVarsName)
	if _, err := os.Stat(fw.vars); err == nil {
		return fw, nil
	}
	if err := needFirmwareFile(binaries.OVMFVars); err != nil {
		return fw, err
	}
	return fw, copyNew(binaries.OVMFVars, fw.vars)
}

func needFirmwareFile(path string) error {
	_, err := os.Stat(path)
	if err == nil {
		return nil
	}
	if pkg := binaries.FirmwarePackages[path]; pkg != "" && errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("firmware %s not found: the runner image needs Debian's %s package", path, pkg)
	}
	return fmt.Errorf("firmware: %w", err)
}

// copyNew copies src to dst (mode 0600) through a temporary file, so a runner killed midway
// never leaves a truncated variable store to be reused.
func copyNew(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".uefi-vars-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// qemuFirmware fills the QEMU spec's firmware fields.
func (fw firmwareFiles) qemu(s *qemu.Spec) {
	s.Firmware, s.FirmwareCode, s.FirmwareVars = fw.kind, fw.code, fw.vars
}

// noBootableOutcome is the run's end when the firmware found nothing to boot.
func noBootableOutcome(cfg runnerconfig.Config, line string) Outcome {
	// OVMF's line ends in a device path nobody needs to read.
	if i := strings.Index(line, " from Fv("); i > 0 {
		line = line[:i]
	}
	return failf(ExitNoBootableDisk, "the root disk has no bootloader (the %s firmware found nothing to boot: %s): use a bootable image, or set guest.kernelImage",
		strings.ToUpper(cfg.Firmware), line)
}
