package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/virtpod/virtpod/runner/binaries"
)

// cloudInitFinal is cloud-init's final message, the last line of the Debian guest's boot on its
// serial console ("Cloud-init v. 22.4.2 finished at ... Up 93.01 seconds"), printed alike
// whichever firmware booted it and wherever its network came from.
var cloudInitFinal = regexp.MustCompile(`Cloud-init v\. \S+ finished at `)

func isCloudInitFinal(line string) bool { return cloudInitFinal.MatchString(line) }

// benchFirmware times the Debian cloud guest's firmware boot (SeaBIOS or OVMF) to cloud-init's
// final message: the runner (a namespace standing in for the pod, --network=pod: the runner
// plumbs the pod network and its DHCP server answers the guest) against plain QEMU with the
// runner's machine, firmware and disk options and a user-mode NIC (QEMU's own DHCP answers
// the guest). Each side gets a fresh overlay on the same raw disk every run; the runner makes
// its own (counted), plain QEMU's is made before its clock starts. Alternating pairs.
func benchFirmware(runnerBin, debian, firmware, qemuBin string, pairs int, timeout time.Duration) error {
	disk := filepath.Join(debian, "disk", "root.img")
	if _, err := os.Stat(disk); err != nil {
		return fmt.Errorf("-debian: %w (make debian-guest)", err)
	}
	if firmware != "bios" && firmware != "uefi" {
		return fmt.Errorf("-firmware: %q is not bios or uefi", firmware)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("-debian needs root: the runner's side runs in a network namespace")
	}
	work, err := os.MkdirTemp("", "benchboot-fw-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	fmt.Printf("\nDebian cloud guest, %s, TCG, 1 vCPU, 768 MiB: runner start -> %q\n", firmware, "Cloud-init v. ... finished at")
	var rt, qt, ratios []float64
	for i := 0; i < pairs; i++ {
		var r, q time.Duration
		runR := func() (err error) {
			r, err = bootRunnerFirmware(runnerBin, qemuBin, debian, firmware, filepath.Join(work, fmt.Sprintf("r%d", i)), timeout)
			return err
		}
		runQ := func() (err error) {
			q, err = bootQEMUFirmware(qemuBin, disk, firmware, filepath.Join(work, fmt.Sprintf("q%d", i)), timeout)
			return err
		}
		if err := inTurn(i, runR, runQ); err != nil {
			return err
		}
		fmt.Printf("pair %d: runner %7.2fs  qemu %7.2fs  ratio %.3f\n", i+1, r.Seconds(), q.Seconds(), r.Seconds()/q.Seconds())
		rt, qt, ratios = append(rt, r.Seconds()), append(qt, q.Seconds()), append(ratios, r.Seconds()/q.Seconds())
	}
	fmt.Printf("%s: median boot to cloud-init's final message: runner %.2fs, plain qemu %.2fs; median ratio %.3f (goal <= 1.05)\n",
		firmware, median(rt), median(qt), median(ratios))
	return nil
}

// bootRunnerFirmware times the runner booting the Debian guest's /disk through firmware.
func bootRunnerFirmware(runnerBin, qemuBin, debian, firmware, state string, timeout time.Duration) (time.Duration, error) {
	// A fresh pod each run: the runner takes its eth0 over for good.
	ns, err := newNetns(filepath.Dir(state))
	if err != nil {
		return 0, err
	}
	defer ns.remove()
	cmd := exec.Command("ip", "netns", "exec", ns.name, runnerBin, "--name=bench", "--accel=tcg", "--cpus=1", "--memory-mib=768",
		"--root-disk="+filepath.Join(debian, "disk"), "--firmware="+firmware, "--network=pod", "--resolv-conf="+ns.resolvConf,
		"--state-dir="+state, "--control-socket=", "--termination-log="+state+".term", "--qemu-binary="+qemuBin, "--grace-period-seconds=1")
	d, err := timeToMarker(cmd, timeout, isCloudInitFinal, nil)
	// The guest's shutdown is not measured: stop the runner (QEMU dies with it, Pdeathsig).
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err != nil {
		return 0, fmt.Errorf("runner, %s: %w", firmware, err)
	}
	return d, nil
}

// bootQEMUFirmware times plain QEMU with the runner's firmware, machine and disk options
// (pkg/qemu's bios-disk-boot and uefi-disk-boot golden files) and the console on stdio.
func bootQEMUFirmware(qemuBin, disk, firmware, dir string, timeout time.Duration) (time.Duration, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	overlay := filepath.Join(dir, "root.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", disk, overlay).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("qemu-img: %v %s", err, out)
	}
	fw := []string{"-bios", binaries.SeaBIOS}
	if firmware == "uefi" {
		vars := filepath.Join(dir, "uefi-vars.fd")
		b, err := os.ReadFile(binaries.OVMFVars)
		if err != nil {
			return 0, err
		}
		if err := os.WriteFile(vars, b, 0o600); err != nil {
			return 0, err
		}
		fw = []string{"-drive", "if=pflash,unit=0,format=raw,read-only=on,file.driver=file,file.filename=" + binaries.OVMFCode,
			"-drive", "if=pflash,unit=1,format=raw,file.driver=file,file.filename=" + vars}
	}
	args := []string{"-machine", "q35,graphics=off", "-accel", "tcg", "-smp", "1", "-m", "768M",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"}
	args = append(args, fw...)
	args = append(args, "-boot", "strict=on",
		"-drive", "if=none,id=root,format=qcow2,file.driver=file,file.filename="+overlay+",cache=none,aio=threads,discard=unmap",
		"-device", "virtio-blk-pci,drive=root,bootindex=0",
		"-netdev", "user,id=net0", "-device", "virtio-net-pci,netdev=net0,mac=52:54:00:12:34:56",
		"-serial", "stdio", "-device", "pvpanic")
	cmd := exec.Command(qemuBin, args...)
	d, err := timeToMarker(cmd, timeout, isCloudInitFinal, nil)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err != nil {
		return 0, fmt.Errorf("qemu, %s: %w", firmware, err)
	}
	return d, nil
}

// netns stands in for a pod: eth0 with 10.214.0.2/24 and a default route to the host end of a
// veth pair, as the runner tests set one up.
type netns struct {
	name, hostIf, resolvConf string
}

func newNetns(work string) (*netns, error) {
	n := &netns{name: fmt.Sprintf("vpbench-%d", os.Getpid()), hostIf: fmt.Sprintf("vpb%dh", os.Getpid()%100000)}
	n.resolvConf = filepath.Join(work, "resolv.conf")
	if err := os.WriteFile(n.resolvConf, []byte("nameserver 10.214.0.1\n"), 0o644); err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"netns", "add", n.name},
		{"link", "add", n.hostIf, "type", "veth", "peer", "name", "eth0", "netns", n.name},
		{"addr", "add", "10.214.0.1/24", "dev", n.hostIf},
		{"link", "set", n.hostIf, "up"},
		{"-n", n.name, "addr", "add", "10.214.0.2/24", "dev", "eth0"},
		{"-n", n.name, "link", "set", "eth0", "up"},
		{"-n", n.name, "link", "set", "lo", "up"},
		{"-n", n.name, "route", "add", "default", "via", "10.214.0.1"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			n.remove()
			return nil, fmt.Errorf("ip %s: %v %s", strings.Join(args, " "), err, out)
		}
	}
	return n, nil
}

// remove deletes the namespace (and with it eth0, the bridge and the tap the runner made).
func (n *netns) remove() {
	_ = exec.Command("ip", "netns", "del", n.name).Run()
	_ = exec.Command("ip", "link", "del", n.hostIf).Run()
}
