package procstatus

import (
	"os"
	"testing"
)

func TestKiB(t *testing.T) {
	status := "Name:\tvirtiofsd\nVmPeak:\t  123456 kB\nVmHWM:\t    6144 kB\nVmRSS:\t    5120 kB\nThreads:\t3\n"
	for field, want := range map[string]int64{"VmHWM": 6144, "VmRSS": 5120, "Vm": 0, "VmSwap": 0} {
		if got := KiB(status, field); got != want {
			t.Errorf("KiB(%s) = %d, want %d", field, got, want)
		}
	}
	if KiB(Read(os.Getpid()), "VmHWM") <= 0 {
		t.Error("this test's own VmHWM reads as nothing")
	}
	if Read(-1) != "" {
		t.Error("a process that does not exist has a status")
	}
}
