package boot

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/tests/prereq"
)

// TestUEFIVarsCopiedOnce: the guest's variable store is a copy of OVMF's template, made once per
// state directory; a restarted runner keeps what the guest wrote.
func TestUEFIVarsCopiedOnce(t *testing.T) {
	_, err := os.Stat(binaries.OVMFVars)
	prereq.Need(t, err == nil, "needs Debian's ovmf (tools/dev/ci/install-deps.sh)")
	cfg := runnerconfig.Config{Provider: runnerconfig.ProviderQEMU, Firmware: runnerconfig.FirmwareUEFI, StateDir: t.TempDir()}
	fw, err := Firmware(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if fw.FirmwareCode != binaries.OVMFCode || fw.FirmwareVars != filepath.Join(cfg.StateDir, uefiVarsName) {
		t.Fatalf("firmware %+v", fw)
	}
	tmpl, _ := os.ReadFile(binaries.OVMFVars)
	got, _ := os.ReadFile(fw.FirmwareVars)
	if !bytes.Equal(got, tmpl) {
		t.Fatal("the variable store is not a copy of OVMF's template")
	}
	got[0] ^= 0xff // the guest wrote a boot entry
	if err := os.WriteFile(fw.FirmwareVars, got, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Firmware(cfg); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(fw.FirmwareVars)
	if !bytes.Equal(again, got) {
		t.Fatal("a restart replaced the guest's variable store")
	}
	// BIOS and cloud-hypervisor have no variable store; cloud-hypervisor has no BIOS.
	bios := cfg
	bios.Firmware = runnerconfig.FirmwareBIOS
	if fw, err := Firmware(bios); err != nil || fw.FirmwareCode != binaries.SeaBIOS || fw.FirmwareVars != "" {
		t.Errorf("bios: %+v, %v", fw, err)
	}
	bios.Provider = runnerconfig.ProviderCloudHypervisor
	if _, err := Firmware(bios); err == nil || !strings.Contains(err.Error(), "--firmware=uefi") {
		t.Errorf("cloud-hypervisor with bios: %v", err)
	}
}
