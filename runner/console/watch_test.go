package console

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// TestConsoleWatchSigns: a kernel panic ends any run; a firmware's "nothing to boot" ends only a
// firmware boot (a kernel boot may print anything).
func TestConsoleWatchSigns(t *testing.T) {
	const panicLine = "[    1.234567] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)"
	for _, tc := range []struct {
		name     string
		firmware bool
		out      string
		want     hypervisor.EventKind
		none     bool
	}{
		{"panic on a kernel boot", false, "[    1.0] VFS: Cannot open root device \"vda\"\r\n" + panicLine + "\r\n", hypervisor.EventPanicked, false},
		{"panic on a firmware boot", true, "Booting from Hard Disk...\r\n" + panicLine + "\r\n", hypervisor.EventPanicked, false},
		{"no bootable device on a firmware boot", true, seabiosEmptyDisk, hypervisor.EventNoBootableDevice, false},
		{"the same words on a kernel boot", false, "echo No bootable device.\r\nNo bootable device.\r\n", 0, true},
		{"a clean boot", false, "[    0.000000] Linux version 6.1.0\r\nVIRTPOD-GUEST-READY\r\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := &fakeHV{events: make(chan hypervisor.Event, 4), exited: make(chan struct{})}
			var console bytes.Buffer
			hv, w := Watch(inner, &console, tc.firmware)
			for chunk := range chunks(tc.out, 5) { // split mid-line
				if _, err := w.Write([]byte(chunk)); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case ev := <-hv.Events():
				if tc.none || ev.Kind != tc.want {
					t.Fatalf("event %v %q, want %v (none: %v)", ev.Kind, ev.Reason, tc.want, tc.none)
				}
				if tc.want == hypervisor.EventPanicked && ev.Reason != panicLine {
					t.Errorf("reason %q, want the panic line", ev.Reason)
				}
			case <-time.After(200 * time.Millisecond):
				if !tc.none {
					t.Fatalf("no event, want %v", tc.want)
				}
			}
			if console.String() != tc.out {
				t.Errorf("the console got %q, want the output unchanged", console.String())
			}
		})
	}
}

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
func (f *fakeHV) Hotplug(context.Context, string, controlapi.HotplugRequest) (controlapi.HotplugStatus, error) {
	return controlapi.HotplugStatus{}, hypervisor.ErrUnsupported
}
func (f *fakeHV) Hotplugged(context.Context) (controlapi.HotplugStatus, error) {
	return controlapi.HotplugStatus{}, hypervisor.ErrUnsupported
}

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
			hv, w := Watch(inner, &console, true)
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
