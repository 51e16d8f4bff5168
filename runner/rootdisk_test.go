package runner_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virtpod/virtpod/runner"
	"github.com/virtpod/virtpod/tests/loopback"
)

// TestRootDiskDirectory: --root-disk may name a VM image's /disk. One that holds no disk, two,
// or a disk in a format the runner cannot boot ends the run at once with exit 8, naming what it
// found and the fix, before any network or hypervisor is set up. (That a directory holding one
// disk boots is TestDiskWithoutBootloader's bios case and TestDebianGuestBootsThroughBIOS.)
func TestRootDiskDirectory(t *testing.T) {
	need(t, haveBinary("qemu-system-x86_64") && haveBinary("qemu-img"), "needs qemu-system-x86 and qemu-utils")
	mk := func(files map[string]string) string {
		dir := filepath.Join(t.TempDir(), "disk")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, format := range files {
			p := filepath.Join(dir, name)
			if out, err := exec.Command("qemu-img", "create", "-q", "-f", format, p, "16M").CombinedOutput(); err != nil {
				t.Fatalf("qemu-img: %v %s", err, out)
			}
		}
		return dir
	}
	for _, tc := range []struct {
		name, dir string
		want      []string
	}{
		{"empty", mk(nil), []string{"root disk: the VM image's /disk is empty: a VM image holds its disk as /disk/root.img, or as the one .qcow2, .img or .raw file in /disk (KubeVirt's containerDisk layout)"}},
		{"two disks", mk(map[string]string{"a.qcow2": "qcow2", "b.img": "raw"}), []string{"root disk: the VM image's /disk holds 2 disk files (a.qcow2, b.img) and no root.img to choose", "keep one, or name the root disk root.img"}},
		{"no disk file", mk(map[string]string{"disk.vmdk": "vmdk"}), []string{"root disk: the VM image's /disk holds no disk file (found disk.vmdk)"}},
		{"a vmdk named qcow2", mk(map[string]string{"disk.qcow2": "vmdk"}), []string{"root disk: ", "/disk/disk.qcow2 is a VMDK image, not a raw or qcow2 disk image: convert it with qemu-img convert -O qcow2"}},
		{"no /disk", filepath.Join(t.TempDir(), "disk"), []string{"root disk: ", "/disk does not exist", "(KubeVirt's containerDisk layout)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := startRunner(t, "", "--name=vm-disk", "--accel=tcg", "--cpus=1", "--memory-mib=128", "--root-disk="+tc.dir,
				"--network=none", "--http-addr="+loopback.FreeAddr(t))
			code, msg := r.waitExit(t, 20*time.Second)
			if code != runner.ExitRootDiskUnusable {
				t.Fatalf("exit %d, want %d; termination message %q", code, runner.ExitRootDiskUnusable, msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("termination message %q does not say %q", msg, w)
				}
			}
			if !strings.Contains(r.stderr.String(), msg) || !strings.Contains(r.stderr.String(), `"exitCode":`+strconv.Itoa(runner.ExitRootDiskUnusable)) {
				t.Errorf("stderr does not state the reason:\n%s", r.stderr.String())
			}
			t.Logf("exit %d after %v: %s", code, time.Since(start).Round(time.Millisecond), msg)
		})
	}
}

// TestDataDiskImageQcow2Refused: an image disk's qcow2 that would make QEMU open a host path (a
// backing file, an external data file) ends the run before the hypervisor starts, the message
// naming the disk and what is wrong. (That a plain one passes is diskfile's TestCheckImage, and
// TestDataDisks boots with one.)
func TestDataDiskImageQcow2Refused(t *testing.T) {
	need(t, haveBinary("qemu-system-x86_64") && haveBinary("qemu-img"), "needs qemu-system-x86 and qemu-utils")
	dir := t.TempDir()
	img := func(name string, args ...string) string {
		p := filepath.Join(dir, name)
		if out, err := exec.Command("qemu-img", append(append([]string{"create", "-q"}, args...), p, "16M")...).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img: %v %s", err, out)
		}
		return p
	}
	root := img("root.img", "-f", "raw")
	for _, tc := range []struct{ name, file, want string }{
		{"backing", img("backing.qcow2", "-f", "qcow2", "-b", "/etc/passwd", "-F", "raw"), "is a qcow2 overlay on a backing file (/etc/passwd)"},
		{"datafile", img("datafile.qcow2", "-f", "qcow2", "-o", "data_file="+filepath.Join(dir, "host-file")), "is a qcow2 image whose data is in an external data file (" + filepath.Join(dir, "host-file") + ")"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startRunner(t, "", "--name=vm-datadisk", "--accel=tcg", "--cpus=1", "--memory-mib=128", "--root-disk="+root,
				"--disk=name=scratch,kind=image,path="+tc.file+",readonly", "--network=none", "--http-addr="+loopback.FreeAddr(t))
			code, msg := r.waitExit(t, 20*time.Second)
			if code != runner.ExitError || !strings.Contains(msg, "--disk scratch: "+tc.file+" "+tc.want) {
				t.Fatalf("exit %d, termination message %q; want exit %d naming disk scratch and saying %q", code, msg, runner.ExitError, tc.want)
			}
		})
	}
}
