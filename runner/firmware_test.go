package runner

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/runner/hypervisor"
	"github.com/virtpod/virtpod/tests/prereq"
)

// fakeHV is a hypervisor whose events and exit the test drives.
type fakeHV struct {
	events chan hypervisor.Event
	exited chan struct{}
}

func (f *fakeHV) Start(context.Context) error     { return nil }
func (f *fakeHV) Resume(context.Context) error    { return nil }
func (f *fakeHV) Version() string                 { return "fake" }
func (f *fakeHV) Events() <-chan hypervisor.Event { return f.events }
func (f *fakeHV) Powerdown(context.Context) error { return nil }
func (f *fakeHV) Quit(context.Context) error      { return nil }
func (f *fakeHV) Exited() <-chan struct{}         { return f.exited }
func (f *fakeHV) ExitDetail() string              { return "" }
func (f *fakeHV) Kill()                           {}

// Console output as Debian's firmware prints it under TCG (escape sequences and all).
const (
	seabiosEmptyDisk = "\x1bc\x1b[?7l\x1b[2J\x1b[0mSeaBIOS (version 1.16.2-debian-1.16.2-1)\r\nBooting from Hard Disk...\r\n" +
		"Boot failed: not a bootable disk\r\n\r\nNo bootable device.\r\n"
	ovmfEmptyDisk = "\x1b[2J\x1b[01;01H\x1b[=3h\x1b[2J\x1b[01;01HBdsDxe: failed to load Boot0001 \"UEFI Misc Device\" from PciRoot(0x0)/Pci(0x1,0x0): Not Found\r\n" +
		"BdsDxe: loading Boot0002 \"EFI Internal Shell\" from Fv(7CB8BDC9-F8EB-4F34-AAEA-3EE4AF6516A1)/FvFile(7C04A583-9E3E-4F1C-AD65-E05268D0B4D1)\r\n"
	ovmfBootsDisk = "\x1b[2J\x1b[01;01HBdsDxe: loading Boot0001 \"UEFI Misc Device\" from PciRoot(0x0)/Pci(0x3,0x0)\r\n" +
		"BdsDxe: starting Boot0001 \"UEFI Misc Device\" from PciRoot(0x0)/Pci(0x3,0x0)\r\n[    0.000000] Linux version 6.1.0\r\n"
	seabiosBootsDisk = "SeaBIOS (version 1.16.2-debian-1.16.2-1)\r\nBooting from Hard Disk...\r\n[    0.000000] Linux version 6.1.0\r\n"
)

// TestBootWatch: each firmware's "nothing to boot" becomes one event, even split across writes;
// a disk that boots raises none; the console output passes through unchanged.
func TestBootWatch(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      string // "" for no event
	}{
		{"SeaBIOS, empty disk", seabiosEmptyDisk, "No bootable device."},
		{"OVMF, empty disk", ovmfEmptyDisk, `BdsDxe: loading Boot0002 "EFI Internal Shell"`},
		{"OVMF boots the disk", ovmfBootsDisk, ""},
		{"SeaBIOS boots the disk", seabiosBootsDisk, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := &fakeHV{events: make(chan hypervisor.Event, 4), exited: make(chan struct{})}
			var console bytes.Buffer
			hv, w := watchConsole(inner, &console, true)
			for chunk := range chunks(tc.out, 7) { // split mid-line and mid-escape
				if _, err := w.Write([]byte(chunk)); err != nil {
					t.Fatal(err)
				}
			}
			inner.events <- hypervisor.Event{Kind: hypervisor.EventRunning, Reason: "RESUME"}
			close(inner.exited)
			var got []hypervisor.Event
			for done := false; !done; {
				select {
				case ev := <-hv.Events():
					got = append(got, ev)
				case <-hv.Exited():
					for len(hv.Events()) > 0 {
						got = append(got, <-hv.Events())
					}
					done = true
				case <-time.After(5 * time.Second):
					t.Fatal("the watch never reported the exit")
				}
			}
			var noBoot []string
			sawRunning := false
			for _, ev := range got {
				switch ev.Kind {
				case hypervisor.EventNoBootableDevice:
					noBoot = append(noBoot, ev.Reason)
				case hypervisor.EventRunning:
					sawRunning = true
				}
			}
			if !sawRunning {
				t.Error("the hypervisor's own event was not passed on")
			}
			switch {
			case tc.want == "" && len(noBoot) > 0:
				t.Errorf("a disk that boots reported %q", noBoot)
			case tc.want != "" && (len(noBoot) != 1 || !strings.Contains(noBoot[0], tc.want) || strings.Contains(noBoot[0], "\x1b")):
				t.Errorf("reported %q, want one line containing %q without escapes", noBoot, tc.want)
			}
			if console.String() != tc.out {
				t.Errorf("the console got %q, want the output unchanged", console.String())
			}
		})
	}
}

// chunks cuts s into pieces of n bytes.
func chunks(s string, n int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for len(s) > 0 {
			k := min(n, len(s))
			if !yield(s[:k]) {
				return
			}
			s = s[k:]
		}
	}
}

func TestNoBootableOutcome(t *testing.T) {
	out := noBootableOutcome(runnerconfig.Config{Firmware: runnerconfig.FirmwareBIOS}, "No bootable device.")
	if out.Code != ExitNoBootableDisk || !strings.Contains(out.Message, "the root disk has no bootloader") ||
		!strings.Contains(out.Message, "use a bootable image, or set guest.kernelImage") || !strings.Contains(out.Message, "BIOS") {
		t.Fatalf("outcome %+v", out)
	}
}

// TestUEFIVarsCopiedOnce: the guest's variable store is a copy of OVMF's template, made once per
// state directory; a restarted runner keeps what the guest wrote.
func TestUEFIVarsCopiedOnce(t *testing.T) {
	_, err := os.Stat(binaries.OVMFVars)
	prereq.Need(t, err == nil, "needs Debian's ovmf (tools/dev/ci/install-deps.sh)")
	cfg := runnerconfig.Config{Provider: runnerconfig.ProviderQEMU, Firmware: runnerconfig.FirmwareUEFI, StateDir: t.TempDir()}
	fw, err := prepareFirmware(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if fw.code != binaries.OVMFCode || fw.vars != filepath.Join(cfg.StateDir, uefiVarsName) {
		t.Fatalf("firmware %+v", fw)
	}
	tmpl, _ := os.ReadFile(binaries.OVMFVars)
	got, _ := os.ReadFile(fw.vars)
	if !bytes.Equal(got, tmpl) {
		t.Fatal("the variable store is not a copy of OVMF's template")
	}
	got[0] ^= 0xff // the guest wrote a boot entry
	if err := os.WriteFile(fw.vars, got, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := prepareFirmware(cfg); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(fw.vars)
	if !bytes.Equal(again, got) {
		t.Fatal("a restart replaced the guest's variable store")
	}
	// BIOS and cloud-hypervisor have no variable store; cloud-hypervisor has no BIOS.
	bios := cfg
	bios.Firmware = runnerconfig.FirmwareBIOS
	if fw, err := prepareFirmware(bios); err != nil || fw.code != binaries.SeaBIOS || fw.vars != "" {
		t.Errorf("bios: %+v, %v", fw, err)
	}
	bios.Provider = runnerconfig.ProviderCloudHypervisor
	if _, err := prepareFirmware(bios); err == nil || !strings.Contains(err.Error(), "--firmware=uefi") {
		t.Errorf("cloud-hypervisor with bios: %v", err)
	}
}
