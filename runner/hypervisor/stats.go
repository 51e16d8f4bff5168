package hypervisor

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/virtpod/virtpod/pkg/controlapi"
)

// Meter is a hypervisor that counts what its guest used, for the control API's GET /v1/stats.
type Meter interface {
	// CPUSeconds is the CPU time the hypervisor process has used, user and system, all its
	// threads (the guest's vCPUs and the device emulation). ErrNotRunning once it ended.
	CPUSeconds() (float64, error)
	// DiskStats are the guest's disks' counters by drive, in the guest's order.
	DiskStats(ctx context.Context) ([]controlapi.DiskStats, error)
}

// CPUSeconds is the CPU time the process has used: utime and stime of /proc/<pid>/stat, which
// count every thread of it, the ones that ended too.
func (p *Process) CPUSeconds() (float64, error) {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0, ErrNotRunning
	}
	select {
	case <-p.waitDone:
		return 0, ErrNotRunning
	default:
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/stat")
	if err != nil {
		return 0, err
	}
	ticks, err := ProcStatCPUTicks(string(b))
	if err != nil {
		return 0, err
	}
	return float64(ticks) / float64(clockTicks), nil
}

// ProcStatCPUTicks reads utime plus stime, in clock ticks, from the text of /proc/<pid>/stat:
// "pid (comm) state ppid ...", where comm may hold spaces and parentheses, so the fields are
// counted from the last ')'; utime and stime are the 14th and 15th fields.
func ProcStatCPUTicks(stat string) (uint64, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc stat %.40q: no command name", stat)
	}
	f := strings.Fields(stat[end+1:]) // from the 3rd field, state
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name, want utime and stime", len(f))
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc stat: utime %q, stime %q are not counts", f[11], f[12])
	}
	return utime + stime, nil
}

// clockTicks is the kernel's USER_HZ, the unit of /proc's CPU times: what sysconf(_SC_CLK_TCK)
// reads from the auxiliary vector (AT_CLKTCK), 100 on every Linux this runs on.
var clockTicks = func() uint64 {
	const atClkTck = 17 // AT_CLKTCK, <linux/auxvec.h>
	if auxv, err := unix.Auxv(); err == nil {
		for _, kv := range auxv {
			if kv[0] == atClkTck && kv[1] > 0 {
				return uint64(kv[1])
			}
		}
	}
	return 100
}()
