// Command qemunext builds the next QEMU the runner must work with — Debian 13's QEMU 10.0, which
// has no block migration — into the dev cache, runnable on this Debian 12 host: a root tree of
// Debian 13's packages (mmdebstrap, no chroot left behind) and bin/qemu-system-x86_64, a wrapper
// that runs that tree's QEMU through the tree's own dynamic loader and libraries. The runner
// tests point VIRTPOD_QEMU_BINARY at the wrapper to migrate a guest from QEMU 7.2 onto 10.0.
//
// The output is cached in $VIRTPOD_CACHE/qemu-next; a changed version rebuilds it.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/virtpod/virtpod/tools/dev/devcache"
)

// version changes whenever what is built changes.
const version = 3

const (
	suite  = "trixie"
	mirror = "http://deb.debian.org/debian"
	// WantMajorMinor is the QEMU release Debian 13 carries; the build fails on another.
	WantMajorMinor = "10.0"
)

// packages are QEMU's emulator and its image tool, whose firmware (SeaBIOS, iPXE, the data
// package) comes as their dependencies, OVMF for guests that boot through UEFI, and virtiofsd
// (1.13, not in Debian 12) for virtio-fs shares: what a runner image on Debian 13 takes
// (imagebuild runner --qemu-root).
var packages = []string{"qemu-system-x86", "qemu-utils", "ovmf", "virtiofsd"}

// Manifest is qemu.json, written last: a build cut short is never current.
type Manifest struct {
	Version      int     `json:"version"`
	Suite        string  `json:"suite"`
	QEMUVersion  string  `json:"qemuVersion"`
	BuildSeconds float64 `json:"buildSeconds"`
}

// wrapper runs the tree's QEMU on this host. The tree's loader and libraries, never the
// host's; its module directory (QEMU_MODULE_DIR) and firmware (-L) likewise. It finds the tree
// beside itself, so the folder can be bind-mounted anywhere.
const wrapper = `#!/bin/sh
# QEMU from Debian ` + suite + `'s packages in ../root, through that tree's own loader and libraries.
d=$(dirname "$(readlink -f "$0")")/../root
lib=$d/usr/lib/x86_64-linux-gnu
export QEMU_MODULE_DIR=$lib/qemu
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$d/usr/bin/qemu-system-x86_64" -L "$d/usr/share/qemu" -L "$d/usr/share/seabios" "$@"
`

// virtiofsdWrapper runs the tree's virtiofsd the same way: the runner tests point
// VIRTPOD_VIRTIOFSD_BINARY at it.
const virtiofsdWrapper = `#!/bin/sh
# virtiofsd from Debian ` + suite + `'s packages in ../root, through that tree's own loader and libraries.
d=$(dirname "$(readlink -f "$0")")/../root
lib=$d/usr/lib/x86_64-linux-gnu
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$d/usr/libexec/virtiofsd" "$@"
`

func main() {
	out := flag.String("out", devcache.Dir("qemu-next"), "directory to build in")
	force := flag.Bool("force", false, "rebuild even when the build is current")
	flag.Parse()
	if err := build(*out, *force); err != nil {
		fmt.Fprintln(os.Stderr, "qemunext:", err)
		os.Exit(1)
	}
}

func build(out string, force bool) error {
	start := time.Now()
	manifest := filepath.Join(out, "qemu.json")
	if current, _ := devcache.Current(manifest, version); current && !force {
		fmt.Printf("QEMU %s from Debian %s up to date in %s\n", WantMajorMinor, suite, out)
		return nil
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return errors.New("mmdebstrap not found: run tools/dev/ci/install-deps.sh (Debian) first")
	}
	if os.Geteuid() != 0 {
		return errors.New("mmdebstrap needs root to build a root tree that keeps its owners")
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	// The work directory sits beside the output, so the finished build moves in by rename.
	work, err := os.MkdirTemp(filepath.Dir(out), ".qemunext-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	root := filepath.Join(work, "root")
	fmt.Printf("mmdebstrap %s with %s\n", suite, strings.Join(packages, ", "))
	cmd := exec.Command("mmdebstrap", "--variant=essential", "--components=main", "--include="+strings.Join(packages, ","),
		"--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/locale/*",
		suite, root, mirror)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mmdebstrap: %w", err)
	}
	bin := filepath.Join(work, "bin", "qemu-system-x86_64")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(bin, []byte(wrapper), 0o755); err != nil {
		return err
	}
	fsd := filepath.Join(work, "bin", "virtiofsd")
	if err := os.WriteFile(fsd, []byte(virtiofsdWrapper), 0o755); err != nil {
		return err
	}
	if got, err := exec.Command(fsd, "--version").CombinedOutput(); err != nil {
		return fmt.Errorf("the built virtiofsd does not run here: %v: %s", err, got)
	}
	got, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("the built QEMU does not run here: %v: %s", err, got)
	}
	v := regexp.MustCompile(`version (\d+\.\d+)\.(\d+)`).FindStringSubmatch(string(got))
	if v == nil || v[1] != WantMajorMinor {
		return fmt.Errorf("Debian %s's QEMU is %q, not %s: update WantMajorMinor and the tests that name it", suite, strings.TrimSpace(string(got)), WantMajorMinor)
	}
	m, _ := json.MarshalIndent(Manifest{Version: version, Suite: suite, QEMUVersion: v[1] + "." + v[2], BuildSeconds: time.Since(start).Seconds()}, "", "  ")
	if err := os.WriteFile(filepath.Join(work, "qemu.json"), m, 0o644); err != nil {
		return err
	}
	if err := os.Chmod(work, 0o755); err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := os.Rename(work, out); err != nil {
		return err
	}
	fmt.Printf("QEMU %s.%s from Debian %s in %s (%.0fs)\n", v[1], v[2], suite, out, time.Since(start).Seconds())
	return nil
}
