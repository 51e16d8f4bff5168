package kvm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// TestProbeThisMachine runs the real probe against this host's /dev/kvm and checks the answer
// against what the host is: no device → not usable at "open"; kvm_pvm alone → the tiny guests
// run but the probe still says not usable, naming kvm_pvm; a hardware module → usable.
func TestProbeThisMachine(t *testing.T) {
	start := time.Now()
	r := Probe(context.Background(), Options{})
	t.Logf("probe: %s (module %q, guest ran %v, %v)", r, r.Module, r.GuestRan, r.Duration)
	if r.Reason == "" {
		t.Fatal("a probe result must always carry a reason")
	}
	if time.Since(start) > DefaultTimeout+2*time.Second {
		t.Fatalf("probe took %v, longer than its timeout", time.Since(start))
	}
	if _, err := os.Stat(DefaultDevice); err != nil {
		if r.Usable || r.Stage != "open" {
			t.Fatalf("no %s here, but the probe said usable=%v at stage %q", DefaultDevice, r.Usable, r.Stage)
		}
		return
	}
	switch vendorModule("/sys/module") {
	case "kvm_pvm":
		if r.Usable || r.Stage != "host-module" || !strings.Contains(r.Reason, "kvm_pvm") {
			t.Fatalf("this host's KVM is kvm_pvm, which cannot boot stock kernels; probe said %s", r)
		}
		if !r.GuestRan {
			t.Logf("note: the tiny guest did not run on kvm_pvm either: %s", r.Reason)
		}
	case "kvm_intel", "kvm_amd":
		if !r.Usable || !r.GuestRan || r.APIVersion != 12 {
			t.Fatalf("hardware KVM present but the probe said %s", r)
		}
	default:
		t.Logf("unknown KVM vendor module; probe said %s", r)
	}
}

func TestProbeMissingDevice(t *testing.T) {
	r := Probe(context.Background(), Options{Device: filepath.Join(t.TempDir(), "kvm")})
	if r.Usable || !r.Absent || r.Stage != "open" || !strings.Contains(r.Reason, "no such file") {
		t.Fatalf("missing device: got %s (absent %v)", r, r.Absent)
	}
}

// TestProbeNotKVM points the probe at a device that opens but is not KVM.
func TestProbeNotKVM(t *testing.T) {
	r := Probe(context.Background(), Options{Device: "/dev/null"})
	if r.Usable || r.Absent || r.Stage != "open" || !strings.Contains(r.Reason, "KVM_GET_API_VERSION") {
		t.Fatalf("/dev/null: got %s", r)
	}
}

func TestVendorModulePrefersHardware(t *testing.T) {
	dir := t.TempDir()
	for _, m := range []string{"kvm", "kvm_pvm", "kvm_intel"} {
		if err := os.Mkdir(filepath.Join(dir, m), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got := vendorModule(dir); got != "kvm_intel" {
		t.Fatalf("vendorModule = %q, want kvm_intel when both are loaded", got)
	}
	if err := os.Remove(filepath.Join(dir, "kvm_intel")); err != nil {
		t.Fatal(err)
	}
	if got := vendorModule(dir); got != "kvm_pvm" {
		t.Fatalf("vendorModule = %q, want kvm_pvm", got)
	}
}

// TestStatusAbsent: no device node is KVM Absent, whose reason names the device.
func TestStatusAbsent(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "kvm")
	k := Probe(context.Background(), Options{Device: dev}).Status()
	if k.State != vmv1.KVMAbsent || k.Reason == "" || k.Device != dev {
		t.Errorf("%+v", k)
	}
}
