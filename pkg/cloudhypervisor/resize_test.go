package cloudhypervisor

import (
	"context"
	"strings"
	"testing"
	"time"
)

func resizableSpec() Spec {
	s := baseSpec()
	s.CPUs, s.MaxCPUs, s.MemoryMiB, s.MaxMemoryMiB = 1, 4, 256, 1024
	return s
}

// TestResizableGolden: max_vcpus and a virtio-mem hotplug region of max - boot memory.
func TestResizableGolden(t *testing.T) {
	c, err := Build(resizableSpec())
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "resizable", c)
	if c.CPUs != (CPUsConfig{BootVCPUs: 1, MaxVCPUs: 4}) || c.Memory != (MemoryConfig{Size: 256 << 20, HotplugSize: 768 << 20, HotplugMethod: HotplugVirtioMem}) {
		t.Errorf("cpus %+v memory %+v", c.CPUs, c.Memory)
	}
	fixed := baseSpec()
	fixed.MaxCPUs, fixed.MaxMemoryMiB = fixed.CPUs, fixed.MemoryMiB
	want, _ := Build(baseSpec())
	got, err := Build(fixed)
	if err != nil || got.CPUs != want.CPUs || got.Memory != want.Memory {
		t.Errorf("max = current changed the config: %+v %+v, %v", got.CPUs, got.Memory, err)
	}
}

func TestResizableRejects(t *testing.T) {
	for name, mutate := range map[string]func(*Spec){
		"max cpus below cpus":     func(s *Spec) { s.CPUs = 5 },
		"max memory below memory": func(s *Spec) { s.MaxMemoryMiB = 128 },
		"not a block multiple":    func(s *Spec) { s.MaxMemoryMiB = 1000 },
	} {
		s := resizableSpec()
		mutate(&s)
		if _, err := Build(s); err == nil {
			t.Errorf("%s: Build accepted it", name)
		}
	}
}

// TestClientResize: vm.resize carries the API's VmResize (desired_vcpus, desired_ram in bytes),
// the VMM's answer shows in vm.info, and a size beyond the boot config's maximum is refused
// with the VMM's words.
func TestClientResize(t *testing.T) {
	_, c := startFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := Build(resizableSpec())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := c.Resize(ctx, VMResize{DesiredVCPUs: 3}); err == nil || !strings.Contains(err.Error(), "405") {
		t.Fatalf("resize before boot: %v, want HTTP 405", err)
	}
	if err := c.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Resize(ctx, VMResize{DesiredVCPUs: 3, DesiredRAM: 768 << 20}); err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil || info.Config.CPUs.BootVCPUs != 3 || info.MemoryActualSize != 768<<20 {
		t.Fatalf("after resize: %+v, %v", info, err)
	}
	if err := c.Resize(ctx, VMResize{DesiredVCPUs: 5}); err == nil || !strings.Contains(err.Error(), "max_vcpus") {
		t.Fatalf("resize beyond max_vcpus: %v", err)
	}
}
