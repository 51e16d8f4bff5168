package main

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestDaemonsDoNotInheritDescriptors: a descriptor the caller left open (a flock(1) lock, say)
// reaches a child before closeInherited and not after.
func TestDaemonsDoNotInheritDescriptors(t *testing.T) {
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY, 0) // no O_CLOEXEC: as inherited
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	open := func() bool {
		out, err := exec.Command("/bin/sh", "-c", "ls /proc/self/fd").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(" "+strings.Join(strings.Fields(string(out)), " ")+" ", " "+strconv.Itoa(fd)+" ")
	}
	if !open() {
		t.Fatalf("fd %d did not reach the child to begin with: the test proves nothing", fd)
	}
	closeInherited()
	if open() {
		t.Fatalf("fd %d still reaches the cluster's processes", fd)
	}
}
