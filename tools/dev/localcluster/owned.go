package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// proc is a process as /proc shows it: its pid and its command line.
type proc struct {
	pid  int
	argv []string
}

func (p proc) String() string { return strings.Join(p.argv, " ") }

// processes lists the processes of this machine but this one.
func processes() []proc {
	var out []proc
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range paths {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue // gone, or a kernel thread
		}
		out = append(out, proc{pid: pid, argv: strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")})
	}
	return out
}

// pidFiles reads the pid folder: component name → the pid its file names.
func (c *cluster) pidFiles() map[string]int {
	pids := map[string]int{}
	for _, name := range components {
		b, err := os.ReadFile(c.path("pids", name+".pid"))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			pids[name] = pid
		}
	}
	return pids
}

// owned picks out of procs what this cluster started, and says why each is ours:
//   - the process a component's pid file names, when it still runs that component's binary
//     (a pid reused by another program is not ours);
//   - a component's binary run on this cluster's state folder, whose pid file is gone;
//   - anything on this cluster's containerd socket: the runc shims and their children.
//
// The same cached binaries run for other reasons on this machine — envtest's kube-apiserver and
// etcd in every controller test and benchmark, a kubectl — and those are not ours: up must not
// refuse to start, nor down report a leftover, because of them.
func (c *cluster) owned(procs []proc, pids map[string]int) map[int]string {
	byPid := map[int]string{}
	for name, pid := range pids {
		byPid[pid] = name
	}
	bins := map[string]string{}
	for _, name := range components {
		bins[c.binFor(name)] = name
	}
	ours := map[int]string{}
	for _, p := range procs {
		if len(p.argv) == 0 {
			continue
		}
		if name, ok := byPid[p.pid]; ok && filepath.Base(p.argv[0]) == filepath.Base(c.binFor(name)) {
			ours[p.pid] = name + " (pid file)"
			continue
		}
		if name, ok := bins[p.argv[0]]; ok && mentions(p.argv[1:], c.dir) {
			ours[p.pid] = name + " (its pid file is gone)"
			continue
		}
		if mentions(p.argv, c.socket()) {
			ours[p.pid] = "on " + c.socket()
		}
	}
	return ours
}

// mentions reports whether an argument names path or something under it, alone or as a flag's
// value (--root-dir=PATH/kubelet); a sibling such as PATH2 does not count.
func mentions(args []string, path string) bool {
	for _, a := range args {
		if strings.Contains(a+"/", path+"/") {
			return true
		}
	}
	return false
}

// leftoverProcesses lists the processes of this cluster that still run, for down's promise and
// up's check for a cluster that was killed rather than stopped.
func (c *cluster) leftoverProcesses() []string {
	procs := processes()
	ours := c.owned(procs, c.pidFiles())
	n := c.second()
	for pid, why := range n.owned(procs, n.pidFiles()) {
		ours[pid] = secondDirName + " " + why
	}
	var left []string
	for _, p := range procs {
		if why, ok := ours[p.pid]; ok {
			left = append(left, fmt.Sprintf("process left: %s [pid %d, %s]", p, p.pid, why))
		}
	}
	return left
}
