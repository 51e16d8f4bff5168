// Package nodereport is the node agent's report of its node: it probes what the node offers the runner
// (KVM, by runner/kvm; emulation; each hypervisor binary with its version or the reason it
// cannot run) and publishes that as the node's labels and its HypervisorNode. It runs from the
// runner image, so it sees exactly the binaries the runner uses (runner/binaries).
package nodereport

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/runner/kvm"
)

// DefaultCommandTimeout bounds each `--version`; a binary that hangs is not runnable.
const DefaultCommandTimeout = 5 * time.Second

// Options say where to look; the zero value probes the runner image's paths.
type Options struct {
	KVMDevice             string
	KVMTimeout            time.Duration
	SysModule             string // for runner/kvm; default /sys/module
	QEMUBinary            string
	QEMUImgBinary         string
	CloudHypervisorBinary string
	QEMUModuleDir         string
	CommandTimeout        time.Duration
	AgentVersion          string
	Now                   func() time.Time
}

func (o *Options) defaults() {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&o.KVMDevice, kvm.DefaultDevice)
	def(&o.QEMUBinary, binaries.QEMU)
	def(&o.QEMUImgBinary, binaries.QEMUImg)
	def(&o.CloudHypervisorBinary, binaries.CloudHypervisor)
	def(&o.QEMUModuleDir, binaries.QEMUModuleDir)
	if o.CommandTimeout <= 0 {
		o.CommandTimeout = DefaultCommandTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Probe probes the node. It takes about KVMTimeout plus a few `--version` runs at most.
func Probe(ctx context.Context, o Options) vmv1.HypervisorNodeStatus {
	o.defaults()
	st := vmv1.HypervisorNodeStatus{
		Arch:          runtime.GOARCH,
		KernelVersion: KernelRelease(),
		AgentVersion:  o.AgentVersion,
		KVM:           kvm.Probe(ctx, kvm.Options{Device: o.KVMDevice, Timeout: o.KVMTimeout, SysModule: o.SysModule}).Status(),
	}
	qemuImg := Binary(ctx, binaries.QEMUImgName, o.QEMUImgBinary, o.CommandTimeout)
	for _, p := range []struct {
		name         vmv1.Provider
		bin, binPath string
	}{
		{vmv1.ProviderQEMU, binaries.QEMUName, o.QEMUBinary},
		{vmv1.ProviderCloudHypervisor, binaries.CloudHypervisorName, o.CloudHypervisorBinary},
	} {
		ps := Binary(ctx, p.bin, p.binPath, o.CommandTimeout)
		ps.Name = p.name
		// The runner needs qemu-img for every provider (it makes the disk overlay).
		if ps.Available && !qemuImg.Available {
			ps.Available, ps.Reason = false, qemuImg.Reason
		}
		st.Providers = append(st.Providers, ps)
	}
	st.Emulation = Emulation(ctx, st.Providers[0], o.QEMUModuleDir, o.CommandTimeout)
	st.HeartbeatTime = metav1.NewTime(o.Now())
	return st
}

// Binary checks one hypervisor binary: it exists, is executable, and `--version` exits 0 within
// the timeout. Name is left to the caller.
func Binary(ctx context.Context, name, path string, timeout time.Duration) vmv1.ProviderStatus {
	ps := vmv1.ProviderStatus{Binary: path}
	fi, err := os.Stat(path)
	if err != nil || fi.IsDir() {
		ps.Reason = fmt.Sprintf("provider binary not found: %s (%s)", name, path)
		return ps
	}
	if fi.Mode()&0o111 == 0 {
		ps.Reason = fmt.Sprintf("provider binary not executable: %s (%s, mode %v)", name, path, fi.Mode())
		return ps
	}
	out, err := runTimeout(ctx, timeout, path, "--version")
	if err != nil {
		ps.Reason = fmt.Sprintf("%s --version: %v%s", path, err, tail(out))
		return ps
	}
	ps.Version = ParseVersion(out)
	if ps.Version == "" {
		ps.Reason = fmt.Sprintf("%s --version printed no version: %q", path, firstLine(out))
		return ps
	}
	ps.Available = true
	return ps
}

// Emulation is available when the runner's QEMU runs and has TCG. Debian builds TCG as a module
// (docs/images.md), so the module file decides; a QEMU without a module directory is taken to be
// built with TCG inside and asked with `-accel help`.
func Emulation(ctx context.Context, qemu vmv1.ProviderStatus, moduleDir string, timeout time.Duration) vmv1.EmulationStatus {
	if !qemu.Available {
		return vmv1.EmulationStatus{Reason: "QEMU is not available: " + qemu.Reason}
	}
	mod := filepath.Join(moduleDir, binaries.TCGModule)
	if _, err := os.Stat(mod); err == nil {
		return vmv1.EmulationStatus{Available: true}
	}
	if fi, err := os.Stat(moduleDir); err == nil && fi.IsDir() {
		return vmv1.EmulationStatus{Reason: fmt.Sprintf("QEMU's TCG module %s is missing: -accel tcg would fail", mod)}
	}
	out, err := runTimeout(ctx, timeout, qemu.Binary, "-accel", "help")
	if err != nil {
		return vmv1.EmulationStatus{Reason: fmt.Sprintf("%s -accel help: %v%s", qemu.Binary, err, tail(out))}
	}
	if !HasTCG(out) {
		return vmv1.EmulationStatus{Reason: fmt.Sprintf("%s lists no tcg accelerator", qemu.Binary)}
	}
	return vmv1.EmulationStatus{Available: true}
}

// HasTCG reads `qemu-system-x86_64 -accel help`: a header line, then one accelerator a line.
func HasTCG(out string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) == "tcg" {
			return true
		}
	}
	return false
}

// versionRE finds the first dotted version in the first line: QEMU prints
// "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)", cloud-hypervisor
// "cloud-hypervisor v41.0.0" (or "v38.0-dirty" from a source build).
var versionRE = regexp.MustCompile(`(?:^|\s)v?(\d+\.\d+(?:\.\d+)?(?:[-+][0-9A-Za-z.+-]*)?)(?:\s|$)`)

// ParseVersion returns the version in a binary's `--version` output, without a leading "v",
// or "" when there is none.
func ParseVersion(out string) string {
	m := versionRE.FindStringSubmatch(firstLine(out))
	if m == nil {
		return ""
	}
	return m[1]
}

// KernelRelease is uname -r.
func KernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

func runTimeout(ctx context.Context, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = time.Second // a grandchild holding the pipe must not hang the probe
	out, err := cmd.CombinedOutput()
	if ctx.Err() == context.DeadlineExceeded {
		return string(out), fmt.Errorf("did not finish within %v", timeout)
	}
	return string(out), err
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(l)
}

func tail(out string) string {
	out = strings.TrimSpace(out)
	if out == "" {
		return ""
	}
	if len(out) > 300 {
		out = "..." + out[len(out)-300:]
	}
	return ": " + out
}
