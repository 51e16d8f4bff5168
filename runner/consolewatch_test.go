package runner

import (
	"bytes"
	"testing"
	"time"

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
			hv, w := watchConsole(inner, &console, tc.firmware)
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
