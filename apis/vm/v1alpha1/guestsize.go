package v1alpha1

import "fmt"

// The guest-size rules, in one place: the CRD's markers repeat the bounds and the hotplug block
// as literals (markers cannot name constants), and guestsize_test.go fails when the generated
// CRD and these constants differ. The runner's flags (pkg/runnerconfig) and both hypervisor
// builders (pkg/qemu, pkg/cloudhypervisor) check a size through GuestSize.Validate.
const (
	// MinGuestCPUs and MaxGuestCPUs bound cpus and maxCPUs. 255: APIC IDs stay below 255, so a
	// guest needs no interrupt remapping.
	MinGuestCPUs int32 = 1
	MaxGuestCPUs int32 = 255

	// MinGuestMemory and MaxGuestMemory bound memory and maxMemory of a VirtualMachine (bytes).
	MinGuestMemory int64 = 64 << 20
	MaxGuestMemory int64 = 1 << 40

	// MinBootMemoryMiB is the least memory the runner boots a guest with. It is below
	// MinGuestMemory because the runner's flags are also used directly (tests, local runs), where
	// only what QEMU and cloud-hypervisor can start matters.
	MinBootMemoryMiB int64 = 16

	// MemoryHotplugBlock is the Linux x86_64 memory block: memory is plugged and unplugged in it
	// (virtio-mem's block size), so memory and maxMemory are multiples of it when maxMemory is
	// above memory.
	MemoryHotplugBlock    int64 = 128 << 20
	MemoryHotplugBlockMiB       = MemoryHotplugBlock >> 20
)

// GuestSize is a guest's size as the runner and the hypervisors count it. A maximum of 0, or
// one equal to the boot size, is a fixed size.
// +kubebuilder:object:generate=false
type GuestSize struct {
	CPUs, MaxCPUs           int32
	MemoryMiB, MaxMemoryMiB int64
}

// SizeNames are what a caller calls GuestSize's fields in its errors: the runner's flags, or a
// builder's words. Memory's names carry the unit (MiB); the messages do not repeat it.
// +kubebuilder:object:generate=false
type SizeNames struct{ CPUs, MaxCPUs, Memory, MaxMemory string }

// SizeWords names the fields in words, for the hypervisor builders.
var SizeWords = SizeNames{CPUs: "cpus", MaxCPUs: "max cpus", Memory: "memory MiB", MaxMemory: "max memory MiB"}

// CPUHotplug says whether vCPUs can be added and removed at run time.
func (s GuestSize) CPUHotplug() bool { return s.MaxCPUs > s.CPUs }

// MemoryHotplug says whether memory can be plugged at run time.
func (s GuestSize) MemoryHotplug() bool { return s.MaxMemoryMiB > s.MemoryMiB }

// EffectiveMaxCPUs is the most vCPUs the guest can have.
func (s GuestSize) EffectiveMaxCPUs() int32 { return max(s.MaxCPUs, s.CPUs) }

// EffectiveMaxMemoryMiB is the most memory the guest can have.
func (s GuestSize) EffectiveMaxMemoryMiB() int64 { return max(s.MaxMemoryMiB, s.MemoryMiB) }

// Validate reports every rule the size breaks, each error naming its fields by n.
func (s GuestSize) Validate(n SizeNames) []error {
	var errs []error
	if s.CPUs < MinGuestCPUs {
		errs = append(errs, fmt.Errorf("%s: must be at least %d, got %d", n.CPUs, MinGuestCPUs, s.CPUs))
	}
	if s.MemoryMiB < MinBootMemoryMiB {
		errs = append(errs, fmt.Errorf("%s: must be at least %d, got %d", n.Memory, MinBootMemoryMiB, s.MemoryMiB))
	}
	if s.MaxCPUs != 0 && (s.MaxCPUs < s.CPUs || s.MaxCPUs > MaxGuestCPUs) {
		errs = append(errs, fmt.Errorf("%s: %d must be between %s (%d) and %d, or 0 for a fixed count", n.MaxCPUs, s.MaxCPUs, n.CPUs, s.CPUs, MaxGuestCPUs))
	}
	if s.MaxMemoryMiB != 0 && s.MaxMemoryMiB < s.MemoryMiB {
		errs = append(errs, fmt.Errorf("%s: %d must be at least %s (%d), or 0 for a fixed size", n.MaxMemory, s.MaxMemoryMiB, n.Memory, s.MemoryMiB))
	}
	if s.MemoryHotplug() && (s.MemoryMiB%MemoryHotplugBlockMiB != 0 || s.MaxMemoryMiB%MemoryHotplugBlockMiB != 0) {
		errs = append(errs, fmt.Errorf("%s, %s: %d and %d must be multiples of %d (the memory hotplug block) when the guest is resizable",
			n.Memory, n.MaxMemory, s.MemoryMiB, s.MaxMemoryMiB, MemoryHotplugBlockMiB))
	}
	return errs
}

// CeilMiB is bytes in MiB, rounded up: how a guest size in bytes (a quantity's value) becomes
// the runner's --memory-mib, and how a size is compared with it.
func CeilMiB(bytes int64) int64 { return (bytes + 1<<20 - 1) >> 20 }
