package runner

import (
	"syscall"
	"testing"
	"time"
)

// A stop's grace runs from the signal's arrival, not from when the supervisor read it, and the
// signal keeps its name through the relay.
func TestGraceFromArrival(t *testing.T) {
	late := arrived{sig: syscall.SIGTERM, at: time.Now().Add(-3 * time.Second)}
	if d := graceEnd(late, 20*time.Second); d < 16*time.Second || d > 17*time.Second {
		t.Errorf("a SIGTERM read 3 s late leaves %v of a 20 s grace, want about 17 s", d)
	}
	if d := graceEnd(arrived{sig: syscall.SIGTERM, at: time.Now().Add(-time.Minute)}, 20*time.Second); d != 0 {
		t.Errorf("a grace long past leaves %v, want 0", d)
	}
	if d := graceEnd(syscall.SIGTERM, 20*time.Second); d != 20*time.Second {
		t.Errorf("a signal without its arrival leaves %v, want the whole 20 s", d)
	}
	if n := signalName(late); n != "SIGTERM" {
		t.Errorf("signalName = %q, want SIGTERM", n)
	}
}
