package nodereport

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/tests/prereq"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)\nCopyright (c) 2003-2022 Fabrice Bellard", "7.2.22"},
		{"qemu-img version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)\n", "7.2.22"},
		{"QEMU emulator version 9.0.50 (v9.0.0-1234-gabcdef)", "9.0.50"},
		{"cloud-hypervisor v41.0.0\n", "41.0.0"},
		{"cloud-hypervisor v38.0-dirty", "38.0-dirty"},
		{"cloud-hypervisor 40.0", "40.0"},
		{"\n  QEMU emulator version 8.2.2\n", "8.2.2"},
		{"usage: something", ""},
		{"", ""},
		{"x86_64 build 12", ""},
	} {
		if got := ParseVersion(tc.out); got != tc.want {
			t.Errorf("ParseVersion(%q) = %q, want %q", tc.out, got, tc.want)
		}
	}
}

func TestHasTCG(t *testing.T) {
	if !HasTCG("Accelerators supported in QEMU binary:\ntcg\nkvm\n") {
		t.Error("tcg not found")
	}
	if HasTCG("Accelerators supported in QEMU binary:\nkvm\n") {
		t.Error("tcg found where there is none")
	}
}

// script writes an executable shell script.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBinary(t *testing.T) {
	ctx := context.Background()
	missing := filepath.Join(t.TempDir(), "cloud-hypervisor")
	if ps := Binary(ctx, binaries.CloudHypervisorName, missing, time.Second); ps.Available || ps.Reason != "provider binary not found: cloud-hypervisor ("+missing+")" {
		t.Errorf("missing: %+v", ps)
	}
	if ps := Binary(ctx, "x", script(t, "echo 'cloud-hypervisor v41.0.0'"), time.Second); !ps.Available || ps.Version != "41.0.0" {
		t.Errorf("good: %+v", ps)
	}
	if ps := Binary(ctx, "x", script(t, "echo 'error while loading shared libraries: libfdt.so.1' >&2; exit 127"), time.Second); ps.Available || !strings.Contains(ps.Reason, "libfdt.so.1") {
		t.Errorf("failing: %+v", ps)
	}
	start := time.Now()
	if ps := Binary(ctx, "x", script(t, "sleep 30"), 200*time.Millisecond); ps.Available || !strings.Contains(ps.Reason, "did not finish within") {
		t.Errorf("hanging: %+v", ps)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("hanging binary took %v", d)
	}
	noexec := filepath.Join(t.TempDir(), "qemu")
	_ = os.WriteFile(noexec, []byte("x"), 0o644)
	if ps := Binary(ctx, "qemu", noexec, time.Second); ps.Available || !strings.Contains(ps.Reason, "not executable") {
		t.Errorf("not executable: %+v", ps)
	}
}

func TestEmulation(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	qemu := vmv1.ProviderStatus{Binary: script(t, "echo 'Accelerators supported in QEMU binary:'; echo tcg"), Available: true}
	if e := Emulation(ctx, qemu, dir, time.Second); e.Available || !strings.Contains(e.Reason, binaries.TCGModule) {
		t.Errorf("module dir without TCG module: %+v", e)
	}
	_ = os.WriteFile(filepath.Join(dir, binaries.TCGModule), nil, 0o644)
	if e := Emulation(ctx, qemu, dir, time.Second); !e.Available {
		t.Errorf("with module: %+v", e)
	}
	if e := Emulation(ctx, qemu, filepath.Join(dir, "none"), time.Second); !e.Available {
		t.Errorf("built-in TCG: %+v", e)
	}
	if e := Emulation(ctx, vmv1.ProviderStatus{Reason: "provider binary not found: x (y)"}, dir, time.Second); e.Available || !strings.Contains(e.Reason, "provider binary not found") {
		t.Errorf("without QEMU: %+v", e)
	}
}

// TestProbeThisMachine is the probe as the agent runs it on this project's machine kinds: KVM
// either absent or served by kvm-pvm (Unusable, with runner/kvm's reason); Debian's QEMU 7.2
// with its TCG module; no cloud-hypervisor.
func TestProbeThisMachine(t *testing.T) {
	_, errKVM := os.Stat("/dev/kvm")
	_, errQEMU := os.Stat(binaries.QEMU)
	_, errPVM := os.Stat("/sys/module/kvm_pvm")
	absent := errors.Is(errKVM, fs.ErrNotExist)
	prereq.Need(t, errQEMU == nil, "needs Debian's qemu-system-x86 (tools/dev/ci/install-deps.sh)")
	prereq.Need(t, absent || errPVM == nil, "this test knows two machine kinds: no /dev/kvm, or /dev/kvm served by kvm_pvm")
	_, errCH := os.Stat(binaries.CloudHypervisor)
	prereq.Need(t, errCH != nil, "cloud-hypervisor is installed here; this test expects it missing")

	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	st := Probe(context.Background(), Options{AgentVersion: "test", Now: func() time.Time { return now }})
	t.Logf("%+v", st)
	switch {
	case absent:
		if st.KVM.State != vmv1.KVMAbsent || st.KVM.Reason != "/dev/kvm does not exist" || st.KVM.Device != "/dev/kvm" {
			t.Errorf("kvm %+v, want Absent: /dev/kvm does not exist", st.KVM)
		}
	case st.KVM.State != vmv1.KVMUnusable || !strings.Contains(st.KVM.Reason, "kvm_pvm") || st.KVM.Device != "/dev/kvm":
		t.Errorf("kvm %+v, want Unusable with runner/kvm's kvm_pvm reason", st.KVM)
	}
	if !st.Emulation.Available {
		t.Errorf("emulation %+v, want available", st.Emulation)
	}
	if len(st.Providers) != 2 {
		t.Fatalf("providers %+v", st.Providers)
	}
	q, ch := st.Providers[0], st.Providers[1]
	if q.Name != vmv1.ProviderQEMU || !q.Available || !regexp.MustCompile(`^7\.2\.\d+$`).MatchString(q.Version) || q.Binary != binaries.QEMU {
		t.Errorf("qemu %+v, want available 7.2.x", q)
	}
	want := "provider binary not found: cloud-hypervisor (/usr/bin/cloud-hypervisor)"
	if ch.Name != vmv1.ProviderCloudHypervisor || ch.Available || ch.Reason != want {
		t.Errorf("cloud-hypervisor %+v, want unavailable: %s", ch, want)
	}
	if st.Arch != runtime.GOARCH || st.KernelVersion == "" || st.AgentVersion != "test" || !st.HeartbeatTime.Time.Equal(now) {
		t.Errorf("arch %q kernel %q agent %q heartbeat %v", st.Arch, st.KernelVersion, st.AgentVersion, st.HeartbeatTime)
	}
}
