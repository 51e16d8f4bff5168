package qemu

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/runner/hypervisor"
	"github.com/virtpod/virtpod/tests/prereq"
)

// TestStartPausedThenQuit drives a real qemu-system-x86_64 through the driver without booting a
// guest: Start launches it paused and connects QMP, the driver reads QEMU's version and the
// guest's size over QMP, and Quit ends the process, which Exited reports. The guest never runs
// (no Resume), so this costs no boot.
func TestStartPausedThenQuit(t *testing.T) {
	binary, err := exec.LookPath("qemu-system-x86_64")
	prereq.Need(t, err == nil, "needs qemu-system-x86 (make runner-deps)")
	fixture := os.Getenv("VIRTPOD_GUEST")
	if fixture == "" {
		fixture = filepath.Join(prereq.Cache(), "guest")
	}
	kernel := filepath.Join(fixture, "boot", "vmlinuz")
	_, err = os.Stat(kernel)
	prereq.Need(t, err == nil, "no guest kernel at "+kernel+": run make guest-fixture")

	dir := t.TempDir()
	root := filepath.Join(dir, "root.img")
	if err := os.WriteFile(root, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	m := hypervisor.Machine{
		Name: "driver-test", Acceleration: "tcg", GuestSize: vmv1.GuestSize{CPUs: 2, MemoryMiB: 128},
		Boot:    hypervisor.Boot{Kernel: kernel, Cmdline: "console=ttyS0"},
		Root:    hypervisor.Disk{Path: root, Format: "raw"},
		Sockets: hypervisor.Sockets{Serial: filepath.Join(dir, "serial.sock"), Control: filepath.Join(dir, "qmp.sock")},
	}
	q := New(binary, nil, m, zaptest.NewLogger(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := q.Start(ctx); err != nil {
		t.Fatalf("Start: %v (%s)", err, q.ExitDetail())
	}
	defer q.Kill()
	if !regexp.MustCompile(`^\d+\.\d+`).MatchString(q.Version()) {
		t.Errorf("Version() = %q, want QEMU's version", q.Version())
	}
	if cpus, mem, err := q.GuestSize(ctx); err != nil || cpus != 2 || mem != 128 {
		t.Errorf("GuestSize = %d vCPUs, %d MiB, %v; want 2, 128", cpus, mem, err)
	}
	if err := q.Quit(ctx); err != nil {
		t.Fatalf("Quit: %v", err)
	}
	select {
	case <-q.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("QEMU did not exit within 30 s of quit")
	}
}
