package boot

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// uefiVarsName is the guest's copy of OVMF's variable store in the state directory: boot
// entries the guest writes (its bootloader's) survive a restart in the same pod.
const uefiVarsName = "uefi-vars.fd"

// Firmware is the firmware a guest without a kernel boots through, in b's firmware fields:
// SeaBIOS, or OVMF's code and the guest's copy of its variable store, copied from OVMF's
// template into the state directory once (a copy left by an earlier container of the pod is
// kept); cloud-hypervisor's own firmware.
func Firmware(cfg runnerconfig.Config) (hypervisor.Boot, error) {
	fw := hypervisor.Boot{Firmware: cfg.Firmware}
	switch {
	case cfg.Provider == runnerconfig.ProviderCloudHypervisor && cfg.Firmware == runnerconfig.FirmwareBIOS:
		return fw, errors.New("--firmware=bios: cloud-hypervisor boots disks through UEFI only; use --firmware=uefi")
	case cfg.Provider == runnerconfig.ProviderCloudHypervisor:
		fw.FirmwareCode = binaries.CloudHypervisorFirmware
	case cfg.Firmware == runnerconfig.FirmwareBIOS:
		fw.FirmwareCode = binaries.SeaBIOS
	default:
		fw.FirmwareCode = binaries.OVMFCode
	}
	if err := needFirmwareFile(fw.FirmwareCode); err != nil {
		return fw, err
	}
	if cfg.Provider != runnerconfig.ProviderQEMU || cfg.Firmware != runnerconfig.FirmwareUEFI {
		return fw, nil
	}
	fw.FirmwareVars = filepath.Join(cfg.StateDir, uefiVarsName)
	if _, err := os.Stat(fw.FirmwareVars); err == nil {
		return fw, nil
	}
	if err := needFirmwareFile(binaries.OVMFVars); err != nil {
		return fw, err
	}
	return fw, copyNew(binaries.OVMFVars, fw.FirmwareVars)
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
