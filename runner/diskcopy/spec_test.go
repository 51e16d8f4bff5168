package diskcopy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	ok := []struct {
		in   string
		want TargetSpec
	}{
		{"drive=root,file=/snap/root/disk.img,size=1048576", TargetSpec{Drive: "root", File: "/snap/root/disk.img", Size: 1 << 20}},
		{"size=512,file=/s/d/disk.img,drive=disk-data,base=/prev/d/disk.img", TargetSpec{Drive: "disk-data", File: "/s/d/disk.img", Size: 512, Base: "/prev/d/disk.img"}},
		{"drive=disk-a-0123456789012345678901234567,file=/x/y,size=1024", TargetSpec{Drive: "disk-a-0123456789012345678901234567", File: "/x/y", Size: 1024}},
	}
	for _, c := range ok {
		got, err := ParseTarget(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseTarget(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	// Each refusal names the flag and says what to write instead.
	bad := []struct{ in, want string }{
		{"", "--target is empty: want drive="},
		{"   ", "--target is empty"},
		{"file=/a/disk.img,size=512", "drive= is missing"},
		{"drive=root,size=512", "file= is missing"},
		{"drive=Root,file=/a/disk.img,size=512", `drive "Root": want root or disk-<name>`},
		{"drive=disk-,file=/a/disk.img,size=512", `drive "disk-": want root`},
		{"drive=data,file=/a/disk.img,size=512", `drive "data": want root or disk-<name>`},
		{"drive=disk-a_b,file=/a/disk.img,size=512", "lower-case letters, digits and '-'"},
		{"drive=disk-../../x,file=/a/disk.img,size=512", `want root or disk-<name>`},
		{"drive=disk-" + strings.Repeat("a", 36) + ",file=/a/disk.img,size=512", "at most 40 characters"},
		{"drive=root,file=a/disk.img,size=512", `file "a/disk.img" is not an absolute path`},
		{"drive=root,file=/a/../etc/disk.img,size=512", "not a clean path: write /etc/disk.img"},
		{"drive=root,file=/a/disk.img/,size=512", "not a clean path: write /a/disk.img"},
		{"drive=root,file=/,size=512", "cannot be a disk file"},
		{"drive=root,file=/a/" + MarkerName + ",size=512", "cannot be a disk file"},
		{"drive=root,file=/a/disk,1.img,size=512", `"1.img" is not key=value: items are separated by commas`},
		{"drive=root,file=/a/b=c.img,size=512", "the value of file contains '='"},
		{"drive=root,file=/a/disk.img,size=512,", "an empty item (a stray comma)"},
		{"drive=root,,file=/a/disk.img,size=512", "an empty item"},
		{"drive=root,file=/a/disk.img,size=512,drive=disk-x", "drive is given twice"},
		{"drive=root,file=/a/disk.img,size=512,cache=none", `unknown key "cache": want one of drive, file, size, base`},
		{"drive=root,file=,size=512", "file= is empty"},
		{"drive=root,file=/a/disk\n.img,size=512", "control character"},
		{"drive=root,file=/a/disk.img,size=0", "size must be more than 0 bytes"},
		{"drive=root,file=/a/disk.img,size=-512", `size "-512" is not a number of bytes: write it in decimal digits`},
		{"drive=root,file=/a/disk.img,size=+512", "not a number of bytes"},
		{"drive=root,file=/a/disk.img,size=10Gi", "not a number of bytes"},
		{"drive=root,file=/a/disk.img,size=0x200", "not a number of bytes"},
		{"drive=root,file=/a/disk.img,size=99999999999999999999", "too large"},
		{"drive=root,file=/a/disk.img,size=1000", "not a whole number of 512-byte sectors"},
		{"drive=root,file=/a/disk.img,size=512,base=rel.img", `base "rel.img" is not an absolute path`},
		{"drive=root,file=/a/disk.img,size=512,base=/a/disk.img", "base and file are the same file"},
	}
	for _, c := range bad {
		_, err := ParseTarget(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "--target") {
			t.Errorf("ParseTarget(%q) = %v; want an error starting --target with %q", c.in, err, c.want)
		}
		if err != nil && ExitCode(err) != ExitRefused {
			t.Errorf("ParseTarget(%q): exit code %d, want %d", c.in, ExitCode(err), ExitRefused)
		}
	}
}

func TestParseCopy(t *testing.T) {
	got, err := ParseCopy("from=/vm/root/disk.img,to=/snap/root/disk.img,size=4096,drive=root")
	if want := (CopySpec{From: "/vm/root/disk.img", To: "/snap/root/disk.img", Size: 4096, Drive: "root"}); err != nil || got != want {
		t.Errorf("ParseCopy = %+v, %v; want %+v", got, err, want)
	}
	got, err = ParseCopy("to=/b/disk.img,from=/a/disk.img")
	if want := (CopySpec{From: "/a/disk.img", To: "/b/disk.img"}); err != nil || got != want {
		t.Errorf("ParseCopy = %+v, %v; want %+v", got, err, want)
	}
	bad := []struct{ in, want string }{
		{"", "--copy is empty: want from="},
		{"from=/a/disk.img", "to= is missing"},
		{"to=/a/disk.img", "from= is missing"},
		{"from=a/disk.img,to=/b/disk.img", `from "a/disk.img" is not an absolute path`},
		{"from=/a/disk.img,to=/b/./disk.img", "not a clean path: write /b/disk.img"},
		{"from=/a/disk.img,to=/a/disk.img", "from and to are the same file"},
		{"from=/a/disk.img,to=/b/disk.img,size=0", "size must be more than 0"},
		{"from=/a/disk.img,to=/b/disk.img,size=1.5", "not a number of bytes"},
		{"from=/a/disk.img,to=/b/disk.img,drive=ROOT", `drive "ROOT"`},
		{"from=/a/disk.img,to=/b/x=y", "contains '='"},
		{"from=/a/disk.img,to=/b/disk.img,base=/c", `unknown key "base"`},
		{"from=/a/disk.img,to=/b/disk.img,to=/c/disk.img", "to is given twice"},
	}
	for _, c := range bad {
		_, err := ParseCopy(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "--copy") {
			t.Errorf("ParseCopy(%q) = %v; want an error starting --copy with %q", c.in, err, c.want)
		}
	}
}

func TestCheckTargets(t *testing.T) {
	root := TargetSpec{Drive: "root", File: "/s/root/disk.img", Size: 512}
	data := TargetSpec{Drive: "disk-data", File: "/s/data/disk.img", Size: 512}
	if err := CheckTargets("/run/virtpod", []TargetSpec{root, data}); err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		dir     string
		targets []TargetSpec
		want    string
	}{
		{"", []TargetSpec{root}, "--control-dir is required"},
		{"run/virtpod", []TargetSpec{root}, "--control-dir \"run/virtpod\": want a clean absolute path"},
		{"/run/virtpod/", []TargetSpec{root}, "want a clean absolute path"},
		{"/run/virtpod", nil, "no --target: give one per drive"},
		{"/run/virtpod", []TargetSpec{root, {Drive: "root", File: "/s/other/disk.img", Size: 512}}, "drive root is given twice"},
		{"/run/virtpod", []TargetSpec{root, {Drive: "disk-x", File: root.File, Size: 512}}, "drives root and disk-x both name file /s/root/disk.img"},
		{"/run/virtpod", []TargetSpec{root, {Drive: "disk-x", File: "/s/root/other.img", Size: 512}}, "both have their file in /s/root"},
		{"/run/virtpod", []TargetSpec{root, {Drive: "disk-x", File: "/s/x/disk.img", Size: 512, Base: root.File}}, "drive disk-x's base /s/root/disk.img is drive root's new file"},
		{"/" + strings.Repeat("d", 100), []TargetSpec{root}, "is too long: the socket"},
	}
	for _, c := range bad {
		err := CheckTargets(c.dir, c.targets)
		if err == nil || !strings.Contains(err.Error(), c.want) || !IsRefused(err) {
			t.Errorf("CheckTargets(%q, %+v) = %v; want a refusal with %q", c.dir, c.targets, err, c.want)
		}
	}
}

func TestCheckCopies(t *testing.T) {
	a := CopySpec{From: "/vm/a/disk.img", To: "/snap/a/disk.img"}
	b := CopySpec{From: "/vm/b/disk.img", To: "/snap/b/disk.img"}
	if err := CheckCopies([]CopySpec{a, b}); err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		copies []CopySpec
		want   string
	}{
		{nil, "no --copy"},
		{[]CopySpec{a, {From: b.From, To: a.To}}, "/snap/a/disk.img is the destination of two copies"},
		{[]CopySpec{a, {From: b.From, To: "/snap/a/other.img"}}, "are in one directory"},
		{[]CopySpec{a, {From: a.To, To: "/restore/a/disk.img"}}, "/snap/a/disk.img is both copied from and written to"},
	}
	for _, c := range bad {
		err := CheckCopies(c.copies)
		if err == nil || !strings.Contains(err.Error(), c.want) || !IsRefused(err) {
			t.Errorf("CheckCopies(%+v) = %v; want a refusal with %q", c.copies, err, c.want)
		}
	}
}

func TestExitCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{refuse("no"), ExitRefused},
		{fmt.Errorf("drive root: %w", refuse("no")), ExitRefused},
		{fmt.Errorf("stopped: %w", context.Canceled), ExitSignalled},
		{errors.New("qemu-nbd failed"), ExitFailed},
	} {
		if got := ExitCode(c.err); got != c.want {
			t.Errorf("ExitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestNBDArgs(t *testing.T) {
	got := strings.Join(nbdArgs("disk-data", "/c/nbd-disk-data.sock", "/c/.nbd-disk-data.pid", "/s/data/disk.img", true), " ")
	want := "--socket=/c/nbd-disk-data.sock --format=raw --export-name=disk-data --shared=1 --cache=none --aio=threads --discard=unmap --detect-zeroes=unmap --pid-file=/c/.nbd-disk-data.pid -- /s/data/disk.img"
	if got != want {
		t.Errorf("nbdArgs =\n%s\nwant\n%s", got, want)
	}
	if got := nbdArgs("root", "/s", "/p", "/f", false); !contains(got, "--cache=writeback") {
		t.Errorf("without O_DIRECT: %q, want --cache=writeback", got)
	}
}
