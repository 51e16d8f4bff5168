package kubeapi

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Pids are the process IDs of this control plane's kube-apiserver and etcd, found by their data
// and certificate folders on their command lines, for benchmarks that measure their CPU.
func (e *Env) Pids() (apiserver, etcd int, err error) {
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, 0, err
	}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(e.dir)) {
			continue
		}
		pid, _ := strconv.Atoi(strings.Split(p, "/")[2])
		switch exe := filepath.Base(string(bytes.SplitN(b, []byte{0}, 2)[0])); exe {
		case "kube-apiserver":
			apiserver = pid
		case "etcd":
			etcd = pid
		}
	}
	if apiserver == 0 || etcd == 0 {
		return 0, 0, fmt.Errorf("kube-apiserver (pid %d) or etcd (pid %d) of %s not found", apiserver, etcd, e.dir)
	}
	return apiserver, etcd, nil
}

// CPUSeconds is the user and system CPU time a process has used.
func CPUSeconds(pid int) (float64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100, nil // clock ticks are 1/100 s on Linux
}
