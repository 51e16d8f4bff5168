package diskfile_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/disk/diskfile"
	"github.com/virtpod/virtpod/tests/prereq"
)

// qcow2Images makes, with qemu-img, the qcow2 headers that would make QEMU open more than the
// image: a backing file naming a host path, an external data file, LUKS encryption. The two
// patched copies reach each refusal by the other path: the data-file extension without its
// incompatible bit, and the LUKS extension with crypt_method cleared.
func qcow2Images(t *testing.T) (bad map[string]string, good []string) {
	t.Helper()
	_, err := exec.LookPath("qemu-img")
	prereq.Need(t, err == nil, "needs qemu-img (qemu-utils): run tools/dev/ci/install-deps.sh")
	dir := t.TempDir()
	img := func(name string, args ...string) string {
		p := filepath.Join(dir, name)
		args = append(append([]string{"create", "-q"}, args...), p, "16M")
		// LUKS times its key derivation by the thread's CPU clock first, and QEMU gives up when
		// a round measures 0 ms ("Unable to get accurate CPU usage"), which a loaded machine's
		// tick accounting can give: that is the fixture's making, so it is tried again.
		for try := 1; ; try++ {
			out, err := exec.Command("qemu-img", args...).CombinedOutput()
			if err == nil {
				return p
			}
			if try == 5 || !strings.Contains(string(out), "Unable to get accurate CPU usage") {
				t.Fatalf("qemu-img %v: %v\n%s", args, err, out)
			}
		}
	}
	patched := func(from, name string, at int, b ...byte) string {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		copy(data[at:], b)
		p := filepath.Join(dir, name)
		write(t, p, data)
		return p
	}
	dataFile := filepath.Join(dir, "host-file")
	df := img("datafile.qcow2", "-f", "qcow2", "-o", "data_file="+dataFile)
	luks := img("luks.qcow2", "--object", "secret,id=sec0,data=pw", "-f", "qcow2", "-o", "encrypt.format=luks,encrypt.key-secret=sec0,encrypt.iter-time=10")
	bad = map[string]string{
		img("backing.qcow2", "-f", "qcow2", "-b", "/etc/passwd", "-F", "raw"): "is a qcow2 overlay on a backing file (/etc/passwd)",
		df: "whose data is in an external data file (" + dataFile + ")",
		img("datafile-raw.qcow2", "-f", "qcow2", "-o", "data_file="+dataFile+"2,data_file_raw=on"): "external data file (" + dataFile + "2)",
		patched(df, "ext-only.qcow2", 72+7, 0):                                                     "external data file (" + dataFile + ")",
		luks:                                                                                       "is an encrypted qcow2 image",
		patched(luks, "luks-ext-only.qcow2", 32, 0, 0, 0, 0):                                       "is an encrypted qcow2 image (LUKS)",
	}
	raw := filepath.Join(dir, "plain.raw")
	write(t, raw, make([]byte, 1<<20))
	good = []string{img("plain.qcow2", "-f", "qcow2"), img("v2.qcow2", "-f", "qcow2", "-o", "compat=0.10"), raw}
	return bad, good
}

// TestCheckImage: every disk image the runner lets QEMU read as qcow2 passes one check; the
// error names the file and what is wrong with it.
func TestCheckImage(t *testing.T) {
	bad, good := qcow2Images(t)
	for file, want := range bad {
		err := diskfile.CheckImage(file)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), file) {
			t.Errorf("%s: CheckImage = %v; want an error naming the file and saying %q", filepath.Base(file), err, want)
		}
		// A root disk is refused for the same reasons.
		if _, err := diskfile.Format(file); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Format = %v; want %q", filepath.Base(file), err, want)
		}
	}
	for _, file := range good {
		if err := diskfile.CheckImage(file); err != nil {
			t.Errorf("%s: CheckImage = %v; want it to pass", filepath.Base(file), err)
		}
	}
}
