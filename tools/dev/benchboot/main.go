// Command benchboot measures what the runner adds to a guest's boot: the time from starting
// the runner to the guest's console marker, against plain qemu-system-x86_64 booting the same
// kernel, initrd and disk under the same acceleration, in alternating pairs so drift on the
// machine hits both sides alike. It also reports the runner's own memory (its RSS, QEMU not
// included). With -debian it also times the firmware boot of the Debian cloud guest (firmware.go).
// It prints figures; it is a benchmark, not a test.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/virtpod/virtpod/tests/procstatus"
)

const marker = "VIRTPOD-GUEST-READY"

func main() {
	guest := flag.String("guest", "", "guest fixture directory (make guest-fixture)")
	pairs := flag.Int("pairs", 5, "number of runner/QEMU pairs")
	qemuBin := flag.String("qemu", "/usr/bin/qemu-system-x86_64", "qemu-system-x86_64")
	timeout := flag.Duration("timeout", 2*time.Minute, "longest wait for one boot")
	debian := flag.String("debian", "", "Debian guest directory (make debian-guest): also time its firmware boot to cloud-init's final message")
	firmwares := flag.String("firmware", "bios,uefi", "with -debian: the firmwares to time, comma-separated (bios, uefi)")
	debianPairs := flag.Int("debian-pairs", 3, "with -debian: runner/QEMU pairs per firmware")
	debianTimeout := flag.Duration("debian-timeout", 8*time.Minute, "with -debian: longest wait for one boot")
	flag.Parse()
	err := run(*guest, *qemuBin, *pairs, *timeout, *debian, strings.Split(*firmwares, ","), *debianPairs, *debianTimeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchboot:", err)
		os.Exit(1)
	}
}

// run builds the runner once for every benchmark it runs: the test guest's kernel boot (unless
// only -debian is given), then the Debian guest's firmware boots.
func run(guest, qemuBin string, pairs int, timeout time.Duration, debian string, firmwares []string, debianPairs int, debianTimeout time.Duration) error {
	bin, err := os.MkdirTemp("", "benchboot-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	runnerBin, err := buildRunner(bin)
	if err != nil {
		return err
	}
	if guest != "" || debian == "" {
		if err := bench(runnerBin, guest, qemuBin, pairs, timeout); err != nil {
			return err
		}
	}
	if debian == "" {
		return nil
	}
	for _, fw := range firmwares {
		if err := benchFirmware(runnerBin, debian, fw, qemuBin, debianPairs, debianTimeout); err != nil {
			return err
		}
	}
	return nil
}

type sample struct {
	runner, qemu   time.Duration
	rssKiB, hwmKiB int64 // the runner's VmRSS when the marker appeared, and its peak
}

func bench(runnerBin, guest, qemuBin string, pairs int, timeout time.Duration) error {
	if guest == "" {
		return fmt.Errorf("-guest is required (the directory make guest-fixture builds)")
	}
	work, err := os.MkdirTemp("", "benchboot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	kernel := filepath.Join(guest, "boot", "vmlinuz")
	initrd := filepath.Join(guest, "boot", "initrd.img")
	disk := filepath.Join(guest, "disk", "root.img")

	var samples []sample
	for i := 0; i < pairs; i++ {
		var s sample
		runRunner := func() error {
			d, rss, hwm, err := bootRunner(runnerBin, qemuBin, kernel, initrd, disk, filepath.Join(work, fmt.Sprintf("r%d", i)), timeout)
			s.runner, s.rssKiB, s.hwmKiB = d, rss, hwm
			return err
		}
		runQEMU := func() error {
			d, err := bootQEMU(qemuBin, kernel, initrd, disk, filepath.Join(work, fmt.Sprintf("q%d", i)), timeout)
			s.qemu = d
			return err
		}
		if err := inTurn(i, runRunner, runQEMU); err != nil {
			return err
		}
		fmt.Printf("pair %d: runner %6.3fs  qemu %6.3fs  ratio %.3f  runner RSS %.1f MiB (peak %.1f MiB)\n",
			i+1, s.runner.Seconds(), s.qemu.Seconds(), s.runner.Seconds()/s.qemu.Seconds(), float64(s.rssKiB)/1024, float64(s.hwmKiB)/1024)
		samples = append(samples, s)
	}
	ratios, rss, hwm, rt, qt := make([]float64, 0, pairs), make([]float64, 0, pairs), make([]float64, 0, pairs), make([]float64, 0, pairs), make([]float64, 0, pairs)
	for _, s := range samples {
		ratios = append(ratios, s.runner.Seconds()/s.qemu.Seconds())
		rss = append(rss, float64(s.rssKiB)/1024)
		hwm = append(hwm, float64(s.hwmKiB)/1024)
		rt = append(rt, s.runner.Seconds())
		qt = append(qt, s.qemu.Seconds())
	}
	fmt.Printf("\nmedian boot to marker: runner %.3fs, plain qemu %.3fs\n", median(rt), median(qt))
	fmt.Printf("median ratio runner/qemu: %.3f (goal <= 1.05)\n", median(ratios))
	fmt.Printf("runner RSS without QEMU: median %.1f MiB at the marker, peak %.1f MiB (goal <= 20 MiB)\n", median(rss), slices.Max(hwm))
	return nil
}

func buildRunner(work string) (string, error) {
	runnerBin := filepath.Join(work, "runner")
	if out, err := exec.Command("go", "build", "-trimpath", "-o", runnerBin, "github.com/virtpod/virtpod/cmd/virtpod-runner").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the runner: %v\n%s", err, out)
	}
	return runnerBin, nil
}

func isMarker(line string) bool { return strings.Contains(line, marker) }

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// bootRunner times runner start -> marker and reads the runner's memory at the marker.
func bootRunner(runnerBin, qemuBin, kernel, initrd, disk, state string, timeout time.Duration) (time.Duration, int64, int64, error) {
	cmd := exec.Command(runnerBin, "--name=bench", "--accel=tcg", "--cpus=1", "--memory-mib=256",
		"--kernel="+kernel, "--initrd="+initrd, "--root-disk="+disk, "--kernel-args=rw",
		"--network=none", "--http-addr=127.0.0.1:0", "--state-dir="+state, "--control-socket=",
		"--termination-log="+filepath.Join(filepath.Dir(state), filepath.Base(state)+".term"),
		"--qemu-binary="+qemuBin, "--grace-period-seconds=10")
	var rss, hwm int64
	d, err := timeToMarker(cmd, timeout, isMarker, func() { rss, hwm = memKiB(cmd.Process.Pid) })
	if err != nil {
		return 0, 0, 0, fmt.Errorf("runner: %w", err)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	return d, rss, hwm, nil
}

// bootQEMU times plain QEMU with the runner's machine, devices and kernel command line, but
// with the console on stdio and an overlay prepared beforehand (so the runner's overlay
// creation counts against the runner).
func bootQEMU(qemuBin, kernel, initrd, disk, dir string, timeout time.Duration) (time.Duration, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	overlay := filepath.Join(dir, "root.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", disk, overlay).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("qemu-img: %v %s", err, out)
	}
	cmd := exec.Command(qemuBin, "-machine", "q35", "-accel", "tcg", "-smp", "1", "-m", "256M",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", kernel, "-initrd", initrd, "-append", "console=ttyS0 root=/dev/vda rw",
		"-drive", "if=none,id=root,format=qcow2,file.driver=file,file.filename="+overlay+",cache=none,aio=threads",
		"-device", "virtio-blk-pci,drive=root", "-serial", "stdio")
	d, err := timeToMarker(cmd, timeout, isMarker, nil)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err != nil {
		return 0, fmt.Errorf("qemu: %w", err)
	}
	return d, nil
}

// timeToMarker starts cmd and returns the time until a line isMarker accepts appears on its
// stdout.
func timeToMarker(cmd *exec.Cmd, timeout time.Duration, isMarker func(string) bool, atMarker func()) (time.Duration, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	found := make(chan time.Duration, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if isMarker(sc.Text()) {
				found <- time.Since(start)
				if atMarker != nil {
					atMarker()
				}
				break
			}
		}
		for sc.Scan() { // keep draining so the console never blocks
		}
	}()
	select {
	case d := <-found:
		time.Sleep(50 * time.Millisecond) // let atMarker read /proc
		return d, nil
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		return 0, fmt.Errorf("no end marker within %v", timeout)
	}
}

// memKiB returns VmRSS and VmHWM of a process, in KiB.
func memKiB(pid int) (rss, hwm int64) {
	st := procstatus.Read(pid)
	return procstatus.KiB(st, "VmRSS"), procstatus.KiB(st, "VmHWM")
}

// inTurn runs one pair: the runner first in even pairs, plain QEMU first in odd ones, so drift on
// the machine hits both sides alike.
func inTurn(pair int, runner, qemu func() error) error {
	first, second := runner, qemu
	if pair%2 == 1 {
		first, second = qemu, runner
	}
	if err := first(); err != nil {
		return err
	}
	return second()
}
