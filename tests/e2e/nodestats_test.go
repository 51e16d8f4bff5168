package e2e

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The local cluster's node is this machine: its kubelet runs pods in cgroup v1 hierarchies with
// the cgroupfs driver (kubepods[/burstable|/besteffort]/pod<uid>), so the benchmarks read a
// pod's memory and CPU, and its processes' memory, where the kubelet's own stats come from.

// podCgroup is the pod's cgroup directory in the v1 hierarchy of controller (memory, cpuacct).
func podCgroup(controller string, uid types.UID) (string, error) {
	for _, pat := range []string{"kubepods/pod%s", "kubepods/*/pod%s"} {
		m, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", controller, fmt.Sprintf(pat, uid)))
		if len(m) == 1 {
			return m[0], nil
		}
	}
	return "", fmt.Errorf("no %s cgroup for pod %s on this machine (is the local cluster's node here?)", controller, uid)
}

// cgroupMem is a pod cgroup's memory as the kernel counts it. WorkingSet is what the kubelet
// reports and evicts by: usage less the inactive file cache.
type cgroupMem struct {
	Usage, WorkingSet, RSS, Cache, Limit int64
}

func readCgroupMem(dir string) (cgroupMem, error) {
	var m cgroupMem
	var err error
	if m.Usage, err = readInt(filepath.Join(dir, "memory.usage_in_bytes")); err != nil {
		return m, err
	}
	if m.Limit, err = readInt(filepath.Join(dir, "memory.limit_in_bytes")); err != nil {
		return m, err
	}
	stat, err := readKeyed(filepath.Join(dir, "memory.stat"), 1)
	if err != nil {
		return m, err
	}
	m.RSS, m.Cache = stat["total_rss"], stat["total_cache"]
	m.WorkingSet = max(m.Usage-stat["total_inactive_file"], 0)
	return m, nil
}

// cgroupCPU is the CPU time the cgroup's tasks used so far.
func cgroupCPU(dir string) (time.Duration, error) {
	ns, err := readInt(filepath.Join(dir, "cpuacct.usage"))
	return time.Duration(ns), err
}

// podProcesses maps the pids of the pod's processes to their command names.
func podProcesses(uid types.UID) map[int]string {
	procs := map[int]string{}
	dirs, _ := os.ReadDir("/proc")
	needle := "/pod" + string(uid)
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cgroup"))
		if err != nil || !strings.Contains(string(cg), needle) {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "comm"))
		procs[pid] = strings.TrimSpace(string(comm))
	}
	return procs
}

func findProcess(procs map[int]string, comm string) int {
	for pid, c := range procs {
		if strings.HasPrefix(c, comm) {
			return pid
		}
	}
	return 0
}

// procMem is one process's resident memory from /proc/<pid>/smaps. For QEMU it is split into
// the guest's RAM (the anonymous mapping of exactly the guest's size), TCG's translation cache
// (the anonymous writable and executable mappings: the code QEMU generates) and the rest, which
// is QEMU's own and what KVM would cost too: its anonymous memory (heap, stacks, TCG's soft TLB)
// and its file pages (the binary and libraries, shared with every other QEMU on the node).
type procMem struct {
	RSS, GuestRAM, TCGCache, OwnAnon int64
	Top                              []mapping // QEMU's own largest resident mappings
}

type mapping struct {
	Name      string
	RSS, Anon int64
}

func (p procMem) Own() int64     { return p.RSS - p.GuestRAM - p.TCGCache }
func (p procMem) OwnFile() int64 { return p.Own() - p.OwnAnon }

func readProcMem(pid int, guestBytes int64) (procMem, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return procMem{}, err
	}
	defer f.Close()
	var m procMem
	var maps []mapping
	var size int64
	var perms, path string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") { // a mapping's header: range perms offset dev inode [path]
			perms, path = fields[1], ""
			if len(fields) > 5 {
				path = fields[5]
			}
			maps = append(maps, mapping{Name: perms + " " + path})
			continue
		}
		if len(fields) < 2 || len(maps) == 0 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		cur := &maps[len(maps)-1]
		switch fields[0] {
		case "Size:":
			size = kb << 10
			cur.Name = fmt.Sprintf("%s (%d KiB)", cur.Name, kb)
		case "Rss:":
			cur.RSS = kb << 10
			m.RSS += cur.RSS
			switch {
			case path == "" && size == guestBytes && guestBytes > 0:
				m.GuestRAM += cur.RSS
				cur.RSS = 0
			case path == "" && strings.HasPrefix(perms, "rwx"):
				m.TCGCache += cur.RSS
				cur.RSS = 0
			}
		case "Anonymous:":
			if cur.RSS > 0 {
				cur.Anon = kb << 10
				m.OwnAnon += cur.Anon
			}
		}
	}
	slices.SortFunc(maps, func(a, b mapping) int { return cmp.Compare(b.RSS, a.RSS) })
	m.Top = maps[:min(len(maps), 8)]
	return m, sc.Err()
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// readKeyed reads "key value..." lines, the value in column col.
func readKeyed(path string, col int) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > col {
			out[f[0]], _ = strconv.ParseInt(f[col], 10, 64)
		}
	}
	return out, nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
