package runner_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtpod/virtpod/runner"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/tests/loopback"
	"github.com/virtpod/virtpod/tests/prereq"
)

// debianBootTimeout bounds a TCG boot of the Debian guest to sshd: firmware, systemd, cloud-init
// (Python) and sshd's first host keys, all emulated.
const debianBootTimeout = 8 * time.Minute

// debianGuest is the directory `make debian-guest` builds (tools/dev/debianguest).
func debianGuest(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("VIRTPOD_DEBIAN_GUEST")
	if dir == "" {
		dir = filepath.Join(prereq.Cache(), "debian-guest")
	}
	_, err := os.Stat(filepath.Join(dir, "image.json"))
	need(t, err == nil, "no Debian guest in "+dir+": run make debian-guest")
	return dir
}

func needFirmware(t *testing.T, files ...string) {
	t.Helper()
	for _, f := range files {
		_, err := os.Stat(f)
		need(t, err == nil, "no firmware "+f+" (Debian's "+binaries.FirmwarePackages[f]+")")
	}
}

// TestDebianGuestBootsThroughBIOS boots the Debian cloud guest from its own bootloader through
// SeaBIOS, its disk given as the image's /disk directory as pods pass it: SeaBIOS reads the disk,
// GRUB loads the kernel, and the kernel mounts its root and starts systemd, all on the console.
// It stops there: the rest of the boot (DHCP from the runner, cloud-init, sshd at the pod IP,
// power-off through systemd) is the same through either firmware and is tests/e2e's
// TestDebianCloudGuest, in a real pod, through OVMF — two more emulated minutes here would add
// nothing.
func TestDebianGuestBootsThroughBIOS(t *testing.T) {
	needGuestHost(t)
	image := debianGuest(t)
	needFirmware(t, binaries.SeaBIOS)
	start := time.Now()
	r := startRunner(t, "", "--name=vm-debian", "--accel=tcg", "--cpus=1", "--memory-mib=768",
		"--root-disk="+filepath.Join(image, "disk"), "--firmware=bios", "--network=none", "--http-addr="+loopback.FreeAddr(t))
	// The kernel's banner, then systemd's first line once the kernel mounted the root.
	for _, want := range []string{"Linux version", "running in system mode"} {
		for !strings.Contains(r.stdout.String(), want) {
			select {
			case <-r.exited:
				t.Fatalf("the runner exited before %q: %s\n%s", want, readFile(r.termLog), tail(r.stdout.String(), 15))
			case <-time.After(200 * time.Millisecond):
			}
			if time.Since(start) > debianBootTimeout {
				t.Fatalf("no %q on the console within %v:\n%s", want, debianBootTimeout, tail(r.stdout.String(), 15))
			}
		}
		t.Logf("%q after %v", want, time.Since(start).Round(time.Second))
	}
	r.signal(t, syscall.SIGKILL) // QEMU dies with its runner (Pdeathsig)
	r.waitExit(t, 30*time.Second)
}

// TestDiskWithoutBootloader: booting an empty disk through either firmware ends the run, well
// within the boot watchdog, with the reason and the fix; it neither hangs in the firmware's
// shell nor retries for ever. The bios case names the disk by its directory: a containerDisk's
// one .raw file is what QEMU boots.
func TestDiskWithoutBootloader(t *testing.T) {
	needGuestHost(t)
	// A containerDisk-style /disk holding one raw disk of zeros; bios is given the directory.
	dir := filepath.Join(t.TempDir(), "disk")
	empty := filepath.Join(dir, "empty.raw")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(empty, 64<<20); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ firmware, file, line, disk string }{
		{"bios", binaries.SeaBIOS, "No bootable device.", dir},
		{"uefi", binaries.OVMFCode, `"EFI Internal Shell"`, empty},
	} {
		t.Run(tc.firmware, func(t *testing.T) {
			needFirmware(t, tc.file)
			start := time.Now()
			r := startRunner(t, "", "--name=vm-empty", "--accel=tcg", "--cpus=1", "--memory-mib=256", "--root-disk="+tc.disk,
				"--firmware="+tc.firmware, "--network=none", "--http-addr="+loopback.FreeAddr(t))
			code, msg := r.waitExit(t, 60*time.Second) // the boot watchdog's default
			took := time.Since(start)
			if code != runner.ExitNoBootableDisk || !strings.Contains(msg, "the root disk has no bootloader") ||
				!strings.Contains(msg, "use a bootable image, or set guest.kernelImage") || !strings.Contains(msg, tc.line) {
				t.Fatalf("exit %d, termination message %q", code, msg)
			}
			t.Logf("%s: failed after %v: %s", tc.firmware, took.Round(time.Millisecond), msg)
		})
	}
}

// waitLog waits for a JSON log line of the runner (stderr) that match accepts, and returns it.
func (r *runnerProc) waitLog(t *testing.T, d time.Duration, match func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, line := range strings.Split(r.stderr.String(), "\n") {
			var l map[string]any
			if json.Unmarshal([]byte(line), &l) == nil && match(l) {
				return l
			}
		}
		select {
		case <-r.exited:
			t.Fatalf("runner exited (code %d) before the log line: %s", r.exitCode, readFile(r.termLog))
		case <-time.After(500 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no such runner log line within %v", d)
		}
	}
}

// sshBanner connects to addr:22 until sshd answers with its version line.
func sshBanner(ip string, d time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var lastErr error
	for ctx.Err() == nil {
		var dialer net.Dialer
		c, err := dialer.DialContext(ctx, "tcp", net.JoinHostPort(ip, "22"))
		if err == nil {
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			line, rerr := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "SSH-2.0-") {
				return strings.TrimSpace(line), nil
			}
			lastErr = rerr
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return "", lastErr
}
