// Package procstatus reads figures from a process's /proc/<pid>/status, for the tests and
// benchmarks that measure memory (VmRSS, VmHWM).
package procstatus

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Read is /proc/<pid>/status, or "" when the process is gone.
func Read(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	return string(b)
}

// KiB is the field's value in status (e.g. "VmHWM", which the kernel gives in kB), or 0 when
// the field is absent.
func KiB(status, field string) int64 {
	for _, line := range strings.Split(status, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}
