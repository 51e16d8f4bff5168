package runner

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/virtpod/virtpod/pkg/qemu"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/binaries"
)

// uefiVarsName is the guest's copy of OVMF's variable store in the state directory: boot
// entries the guest writes (its bootloader's) survive a restart in the same pod.
const uefiVarsName = "uefi-vars.fd"

// firmwareFiles are what a guest without a kernel boots through.
type firmwareFiles struct {
	kind string // runnerconfig.FirmwareBIOS or FirmwareUEFI
	code string // SeaBIOS, or the UEFI code (read-only)
	vars string // the guest's UEFI variable store; "" for bios and cloud-hypervisor
}

// prepareFirmware finds the firmware for cfg and, for OVMF, copies its variable store template
// into the state directory once; a copy left by an earlier container of the pod is kept.
func prepareFirmware(cfg runnerconfig.Config) (firmwareFiles, error) {
	fw := firmwareFiles{kind: cfg.Firmware}
	switch {
	case cfg.Provider == runnerconfig.ProviderCloudHypervisor && cfg.Firmware == runnerconfig.FirmwareBIOS:
		return fw, errors.New("--firmware=bios: cloud-hypervisor boots disks through UEFI only; use --firmware=uefi")
	case cfg.Provider == runnerconfig.ProviderCloudHypervisor:
		fw.code = binaries.CloudHypervisorFirmware
	case cfg.Firmware == runnerconfig.FirmwareBIOS:
		fw.code = binaries.SeaBIOS
	default:
		fw.code = binaries.OVMFCode
	}
	if err := needFirmwareFile(fw.code); err != nil {
		return fw, err
	}
	if cfg.Provider != runnerconfig.ProviderQEMU || cfg.Firmware != runnerconfig.FirmwareUEFI {
		return fw, nil
	}
	fw.vars = filepath.Join(cfg.StateDir, uefiVarsName)
	if _, err := os.Stat(fw.vars); err == nil {
		return fw, nil
	}
	if err := needFirmwareFile(binaries.OVMFVars); err != nil {
		return fw, err
	}
	return fw, copyNew(binaries.OVMFVars, fw.vars)
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

// qemuFirmware fills the QEMU spec's firmware fields.
func (fw firmwareFiles) qemu(s *qemu.Spec) {
	s.Firmware, s.FirmwareCode, s.FirmwareVars = fw.kind, fw.code, fw.vars
}

// noBootableDevice lists what each firmware prints when it finds nothing to boot: SeaBIOS says
// so (and retries a minute later), OVMF falls back to its interactive shell, where it would wait
// forever; newer OVMF builds say it in words.
var noBootableDevice = []string{
	"No bootable device.",
	`"EFI Internal Shell"`,
	"BdsDxe: No bootable option or device was found",
}

// bootWatch scans the console for the firmware's "nothing to boot" and reports it as an event,
// so a disk without a bootloader ends the run instead of hanging in firmware.
type bootWatch struct {
	hypervisor
	out     io.Writer
	events  chan event
	exited  chan struct{}
	mu      sync.Mutex
	line    []byte
	matched bool
	found   chan string
}

// watchFirmwareBoot wraps hv so its events include a firmware's "no bootable device" seen on
// the console; the console must write through the returned writer.
func watchFirmwareBoot(hv hypervisor, console io.Writer) (hypervisor, io.Writer) {
	w := &bootWatch{hypervisor: hv, out: console, events: make(chan event, 64), exited: make(chan struct{}), found: make(chan string, 1)}
	go w.forward()
	return w, w
}

func (w *bootWatch) Events() <-chan event    { return w.events }
func (w *bootWatch) Exited() <-chan struct{} { return w.exited }

// forward passes the hypervisor's events on, adding the console's finding; Exited closes only
// after every event of the hypervisor has been passed on.
func (w *bootWatch) forward() {
	in := w.hypervisor.Events()
	for {
		ev, ok := w.next(in, w.hypervisor.Exited())
		if !ok {
			break
		}
		w.events <- ev
	}
	for len(in) > 0 || len(w.found) > 0 {
		ev, _ := w.next(in, nil)
		w.events <- ev
	}
	close(w.exited)
}

// next waits for the hypervisor's next event or the console's finding; false once stop closes.
func (w *bootWatch) next(in <-chan event, stop <-chan struct{}) (event, bool) {
	select {
	case ev := <-in:
		return ev, true
	case line := <-w.found:
		return event{kind: eventNoBootableDevice, reason: line}, true
	case <-stop:
		return event{}, false
	}
}

// Write passes the console output on and looks at each complete line.
func (w *bootWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	if !w.matched {
		for _, c := range p {
			if c != '\n' && c != '\r' {
				if len(w.line) < 1024 {
					w.line = append(w.line, c)
				}
				continue
			}
			if line := strings.TrimSpace(stripEscapes(string(w.line))); w.check(line) {
				break
			}
			w.line = w.line[:0]
		}
		// A prompt ("Shell> ") ends no line; the shell's banner line has already matched.
	}
	w.mu.Unlock()
	return w.out.Write(p)
}

func (w *bootWatch) check(line string) bool {
	for _, m := range noBootableDevice {
		if strings.Contains(line, m) {
			w.matched = true
			w.found <- line
			return true
		}
	}
	return false
}

// stripEscapes removes ANSI control sequences (ESC [ ... letter), which OVMF's console output
// is full of.
func stripEscapes(s string) string {
	if !strings.Contains(s, "\x1b") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != 0x1b {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '[' {
			i += 2
			for i < len(s) && (s[i] < '@' || s[i] > '~') {
				i++
			}
			continue
		}
		i++ // a two-byte sequence such as ESC c
	}
	return b.String()
}

var _ hypervisor = (*bootWatch)(nil)

// noBootableOutcome is the run's end when the firmware found nothing to boot.
func noBootableOutcome(cfg runnerconfig.Config, line string) Outcome {
	// OVMF's line ends in a device path nobody needs to read.
	if i := strings.Index(line, " from Fv("); i > 0 {
		line = line[:i]
	}
	return failf(ExitNoBootableDisk, "the root disk has no bootloader (the %s firmware found nothing to boot: %s): use a bootable image, or set guest.kernelImage",
		strings.ToUpper(cfg.Firmware), line)
}
