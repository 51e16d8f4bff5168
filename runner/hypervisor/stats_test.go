package hypervisor

import (
	"os/exec"
	"testing"
	"time"
)

// TestProcStatCPUTicks reads utime and stime after the command name, which may hold spaces and
// parentheses of its own.
func TestProcStatCPUTicks(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want uint64
	}{
		// A QEMU's /proc/<pid>/stat (Linux 6.1): utime 1234, stime 567.
		{"4242 (qemu-system-x86) S 4200 4242 4242 0 -1 4194560 30512 0 12 0 1234 567 0 0 20 0 9 0 4331 1493843968 52311 18446744073709551615 1 1 0 0 0 0 0 4096 17635 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n", 1801},
		{"7 (a) b) (c) R 1 7 7 0 -1 0 0 0 0 0 10 5 0 0 20 0 1 0 1 0 0\n", 15},
	} {
		if got, err := ProcStatCPUTicks(tc.stat); err != nil || got != tc.want {
			t.Errorf("%.30q: %d, %v; want %d", tc.stat, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "4242 qemu S 1 2", "4242 (qemu) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 ten 5 0 0"} {
		if _, err := ProcStatCPUTicks(bad); err == nil {
			t.Errorf("%q: read as CPU times", bad)
		}
	}
}

// TestProcessCPUSeconds: a busy child's CPU time grows, read from its /proc; none once it ended.
func TestProcessCPUSeconds(t *testing.T) {
	var p Process
	if _, err := p.CPUSeconds(); err != ErrNotRunning {
		t.Fatalf("before a start: %v, want ErrNotRunning", err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	if err := p.Start(exec.Command(sh, "-c", "while :; do :; done")); err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	var cpu float64
	for deadline := time.Now().Add(20 * time.Second); cpu < 0.2 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cpu, err = p.CPUSeconds(); err != nil {
			t.Fatal(err)
		}
	}
	if cpu < 0.2 {
		t.Fatalf("a busy loop used %.2f s of CPU in 20 s", cpu)
	}
	p.Kill()
	<-p.Done()
	if _, err := p.CPUSeconds(); err != ErrNotRunning {
		t.Errorf("after the end: %v, want ErrNotRunning", err)
	}
}
