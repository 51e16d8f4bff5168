package console

import (
	"io"
	"strings"
	"sync"

	"github.com/virtpod/virtpod/runner/hypervisor"
)

// noBootableDevice lists what each firmware prints when it finds nothing to boot: SeaBIOS says
// so (and retries a minute later), OVMF falls back to its interactive shell, where it would wait
// forever; newer OVMF builds say it in words.
var noBootableDevice = []string{
	"No bootable device.",
	`"EFI Internal Shell"`,
	"BdsDxe: No bootable option or device was found",
}

// kernelPanic is what Linux prints when it panics, however early: a panic before any driver
// (pvpanic is a module the guest may never load) or one that, with the kernel's default panic=0,
// leaves the guest spinning forever while QEMU burns a core and the pod looks Running.
const kernelPanic = "Kernel panic - not syncing"

// consoleSign is a console line that ends the run: what it contains and what it means.
type consoleSign struct {
	text string
	kind hypervisor.EventKind
}

// consoleSigns are what the runner watches for: a kernel panic always, and with firmware boot
// the firmware finding nothing to boot.
func consoleSigns(firmwareBoot bool) []consoleSign {
	signs := []consoleSign{{kernelPanic, hypervisor.EventPanicked}}
	if firmwareBoot {
		for _, t := range noBootableDevice {
			signs = append(signs, consoleSign{t, hypervisor.EventNoBootableDevice})
		}
	}
	return signs
}

// bootWatch scans the console for lines that end the run (consoleSigns) and reports them as
// events, so a panicked kernel or a disk without a bootloader ends the run instead of hanging.
type bootWatch struct {
	hypervisor.Hypervisor
	out     io.Writer
	events  chan hypervisor.Event
	exited  chan struct{}
	mu      sync.Mutex
	line    []byte
	matched bool
	signs   []consoleSign
	found   chan hypervisor.Event
}

// Watch wraps hv so its events include what the console shows (consoleSigns); the
// console must write through the returned writer.
func Watch(hv hypervisor.Hypervisor, console io.Writer, firmwareBoot bool) (hypervisor.Hypervisor, io.Writer) {
	w := &bootWatch{Hypervisor: hv, out: console, events: make(chan hypervisor.Event, 64), exited: make(chan struct{}),
		signs: consoleSigns(firmwareBoot), found: make(chan hypervisor.Event, 1)}
	go w.forward()
	return w, w
}

func (w *bootWatch) Events() <-chan hypervisor.Event { return w.events }
func (w *bootWatch) Exited() <-chan struct{}         { return w.exited }

// forward passes the hypervisor's events on, adding the console's finding; Exited closes only
// after every event of the hypervisor has been passed on.
func (w *bootWatch) forward() {
	in := w.Hypervisor.Events()
	for {
		ev, ok := w.next(in, w.Hypervisor.Exited())
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
func (w *bootWatch) next(in <-chan hypervisor.Event, stop <-chan struct{}) (hypervisor.Event, bool) {
	select {
	case ev := <-in:
		return ev, true
	case ev := <-w.found:
		return ev, true
	case <-stop:
		return hypervisor.Event{}, false
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
	for _, sign := range w.signs {
		if strings.Contains(line, sign.text) {
			w.matched = true
			w.found <- hypervisor.Event{Kind: sign.kind, Reason: line}
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

var _ hypervisor.Hypervisor = (*bootWatch)(nil)
