package runner_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
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

// TestDebianGuestBootsFromItsDisk boots the Debian cloud guest from its own bootloader through
// SeaBIOS, in a namespace standing in for the pod: the runner's DHCP server hands it the pod IP
// (the runner logs the ACK; the guest then answers at that IP), sshd answers at the pod IP from
// the host side, and SIGTERM powers it off through systemd. Through OVMF, the same guest and
// the same checks are tests/e2e's TestDebianCloudGuest, in a real pod: a second emulated boot
// here (two minutes of CI) would add nothing.
func TestDebianGuestBootsFromItsDisk(t *testing.T) {
	needGuestHost(t)
	image := debianGuest(t)
	for i, firmware := range []string{"bios"} {
		t.Run(firmware, func(t *testing.T) {
			if firmware == "uefi" {
				needFirmware(t, binaries.OVMFCode, binaries.OVMFVars)
			} else {
				needFirmware(t, binaries.SeaBIOS)
			}
			ns := newPodNetns(t, 13+i)
			// The disk by its path, and (bios) the image's /disk directory, as pods pass it.
			disk := filepath.Join(image, "disk", "root.img")
			if firmware == "bios" {
				disk = filepath.Dir(disk)
			}
			start := time.Now()
			r := startRunner(t, ns.name, "--name=vm-debian", "--accel=tcg", "--cpus=1", "--memory-mib=768",
				"--root-disk="+disk, "--firmware="+firmware,
				"--network=pod", "--resolv-conf="+ns.resolvConf, "--grace-period-seconds=90")

			ack := r.waitLog(t, debianBootTimeout, func(l map[string]any) bool {
				return l["msg"] == "dhcp answer" && l["type"] == "ACK" && l["ip"] == ns.podIP
			})
			leased := time.Since(start)
			t.Logf("%s: DHCP ACK %v after %v", firmware, ack, leased.Round(time.Second))
			if ack["hostname"] != "vm-debian" || ack["gateway"] != ns.gwIP || ack["prefix"] != ns.podIP+"/24" {
				t.Errorf("the lease: %v", ack)
			}

			banner, err := sshBanner(ns.podIP, debianBootTimeout-time.Since(start))
			if err != nil {
				t.Fatalf("sshd at the pod IP %s from the host side: %v", ns.podIP, err)
			}
			t.Logf("%s: %q at %s:22 after %v (runner start -> DHCP ACK %v -> sshd %v)", firmware, banner, ns.podIP,
				time.Since(start).Round(time.Second), leased.Round(time.Second), (time.Since(start) - leased).Round(time.Second))
			if !strings.Contains(r.stdout.String(), "Linux version") {
				t.Errorf("the guest's kernel log is not on the console")
			}
			// The guest's own view: cloud-init's network table on the console lists the pod IP.
			if !slices.ContainsFunc(strings.Split(r.stdout.String(), "\n"), func(l string) bool {
				return strings.Contains(l, "ci-info:") && strings.Contains(l, " "+ns.podIP+" ")
			}) {
				t.Errorf("cloud-init's network table on the console does not list %s", ns.podIP)
			}

			r.signal(t, syscall.SIGTERM)
			code, msg := r.waitExit(t, 3*time.Minute)
			if code != runner.ExitOK || msg != "stopped on SIGTERM: guest powered off" {
				t.Fatalf("after SIGTERM: exit %d, termination message %q", code, msg)
			}
			// systemd reached its power-off (not the grace period's kill), then the kernel.
			for _, want := range []string{"reboot: Power down"} {
				if !strings.Contains(r.stdout.String(), want) {
					t.Fatalf("the console does not show %q:\n%s", want, tail(r.stdout.String(), 15))
				}
			}
		})
	}
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
