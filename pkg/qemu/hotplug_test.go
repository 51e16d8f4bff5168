package qemu

import (
	"slices"
	"strings"
	"testing"
)

// resizableSpec is the runner test's guest: 1 of 4 CPUs, 256 MiB of 1 GiB, under TCG.
func resizableSpec() Spec {
	s := baseSpec()
	s.Acceleration, s.TapFD, s.MAC = "tcg", 0, nil
	s.CPUs, s.MaxCPUs, s.MemoryMiB, s.MaxMemoryMiB = 1, 4, 256, 1024
	return s
}

func TestHotplugGolden(t *testing.T) {
	kvm := baseSpec()
	kvm.CPUs, kvm.MaxCPUs, kvm.MemoryMiB, kvm.MaxMemoryMiB = 3, 8, 1024, 4096
	cpuOnly := resizableSpec()
	cpuOnly.MaxMemoryMiB = 0
	cpuOnly.CPUModel = "max"
	memOnly := resizableSpec()
	memOnly.MaxCPUs = 1
	for name, s := range map[string]Spec{"resizable-tcg": resizableSpec(), "resizable-kvm": kvm, "resizable-cpus-only": cpuOnly, "resizable-memory-only": memOnly} {
		t.Run(name, func(t *testing.T) {
			args, err := Args(s)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name, args)
		})
	}
}

// TestFixedSizeArgvUnchanged: a guest whose maximum is its size (or unset) gets exactly the argv
// of a guest that never heard of resizing.
func TestFixedSizeArgvUnchanged(t *testing.T) {
	for _, base := range []Spec{baseSpec(), uefiSpec(), biosSpec()} {
		want, err := Args(base)
		if err != nil {
			t.Fatal(err)
		}
		same := base
		same.MaxCPUs, same.MaxMemoryMiB = base.CPUs, base.MemoryMiB
		got, err := Args(same)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("max = current changed the argv:\n got %q\nwant %q", got, want)
		}
		for _, a := range got {
			if strings.Contains(a, "maxcpus") || strings.Contains(a, "maxmem") || strings.Contains(a, "virtio-mem") {
				t.Errorf("fixed-size argv has %q", a)
			}
		}
	}
}

// TestBootCPUsAreUnpluggable: every boot CPU but the first is a -device with the id the runner
// unplugs by, in its own socket, of the model QEMU runs.
func TestBootCPUsAreUnpluggable(t *testing.T) {
	s := resizableSpec()
	s.CPUs = 3
	args, err := Args(s)
	if err != nil {
		t.Fatal(err)
	}
	var cpus []string
	for i, a := range args {
		if a == "-device" && strings.HasPrefix(args[i+1], "qemu64-x86_64-cpu,") {
			cpus = append(cpus, args[i+1])
		}
	}
	want := []string{"qemu64-x86_64-cpu,id=cpu1,socket-id=1,core-id=0,thread-id=0", "qemu64-x86_64-cpu,id=cpu2,socket-id=2,core-id=0,thread-id=0"}
	if !slices.Equal(cpus, want) {
		t.Errorf("boot CPU devices %q, want %q", cpus, want)
	}
	if got := args[slices.Index(args, "-smp")+1]; got != "cpus=1,maxcpus=4,sockets=4,cores=1,threads=1" {
		t.Errorf("-smp %s", got)
	}
	if d := (Spec{Acceleration: "kvm"}).CPUDriver(); d != "host-x86_64-cpu" {
		t.Errorf("kvm's default CPU driver %s, want host-x86_64-cpu", d)
	}
}

func TestHotplugRejects(t *testing.T) {
	for name, mutate := range map[string]func(*Spec){
		"max cpus below cpus":     func(s *Spec) { s.CPUs, s.MaxCPUs = 3, 2 },
		"max cpus beyond 255":     func(s *Spec) { s.MaxCPUs = 256 },
		"max memory below memory": func(s *Spec) { s.MaxMemoryMiB = 128 },
		"memory not a block":      func(s *Spec) { s.MemoryMiB = 200 },
		"max memory not a block":  func(s *Spec) { s.MaxMemoryMiB = 1000 },
		"negative max memory":     func(s *Spec) { s.MaxMemoryMiB = -1 },
		"negative max cpus":       func(s *Spec) { s.MaxCPUs = -1 },
	} {
		s := resizableSpec()
		mutate(&s)
		if _, err := Args(s); err == nil {
			t.Errorf("%s: Args accepted it", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
