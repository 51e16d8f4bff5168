package runner_test

import (
	"strings"
	"testing"

	"github.com/virtpod/virtpod/runner"
	"github.com/virtpod/virtpod/tests/loopback"
)

// TestEarlyKernelPanicEndsTheRun: a guest kernel that panics before any driver can report it
// (no init to run, so no root disk: the Debian cloud kernel's default panic=0 then spins forever,
// and pvpanic is a module it never loaded) ends the run with the panic's own words, within
// seconds of it, instead of leaving a Running VM that burns a core.
func TestEarlyKernelPanicEndsTheRun(t *testing.T) {
	guest := needGuestHost(t)
	args := baseArgs(t, guest, "vm-panic")
	for i, a := range args {
		if strings.HasPrefix(a, "--kernel-args=") {
			args[i] = "--kernel-args=rw rdinit=/nonexistent-init"
		}
	}
	r := startRunner(t, "", append(args, "--network=none", "--http-addr="+loopback.FreeAddr(t))...)
	code, msg := r.waitExit(t, bootTimeout)
	if code != runner.ExitGuestPanicked || !strings.Contains(msg, "guest kernel panicked") || !strings.Contains(msg, "Kernel panic - not syncing") {
		t.Fatalf("exit %d, termination message %q; want exit %d with the panic line", code, msg, runner.ExitGuestPanicked)
	}
	t.Logf("exit %d: %s", code, msg)
}
