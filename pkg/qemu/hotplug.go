package qemu

import (
	"fmt"
	"strconv"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Hotplug layout of a resizable guest. CPUs: one core per socket, so QEMU can add and remove
// each vCPU on its own (q35 hot-adds whole sockets' worth of what query-hotpluggable-cpus lists);
// every CPU but the first is a -device with an id, so any of them can be unplugged later.
// Memory: the boot RAM plus one virtio-mem device over a RAM backend of MaxMemoryMiB-MemoryMiB,
// plugged in vmv1.MemoryHotplugBlock blocks (the Linux x86_64 memory block, so each block
// onlines and offlines whole). docs/runner.md says why virtio-mem and not DIMMs.
const (
	// VirtioMemID is the virtio-mem device's id: the runner sets its requested-size over QMP at
	// /machine/peripheral/<id>.
	VirtioMemID      = "vmem0"
	virtioMemBackend = "vmem0-ram"
)

// CPUDeviceID names the hotpluggable vCPU in socket n (n >= 1; socket 0 is the boot CPU).
func CPUDeviceID(n int) string { return "cpu" + strconv.Itoa(n) }

// CPUDriver is the QOM type of a vCPU of this spec's model, as device_add takes it.
func (s Spec) CPUDriver() string { return s.cpuModel() + "-x86_64-cpu" }

// cpuModel is the -cpu QEMU runs: the spec's, else host under kvm and qemu64 (QEMU's x86_64
// default) under tcg.
func (s Spec) cpuModel() string {
	switch {
	case s.CPUModel != "":
		return s.CPUModel
	case s.Acceleration == "kvm":
		return "host"
	}
	return "qemu64"
}

// sizeArgs are -smp and -m, with the CPUs beyond the first as unpluggable devices.
func (s Spec) sizeArgs() []string {
	var args []string
	if s.CPUHotplug() {
		args = append(args, "-smp", fmt.Sprintf("cpus=1,maxcpus=%d,sockets=%d,cores=1,threads=1", s.MaxCPUs, s.MaxCPUs))
		for n := 1; n < int(s.CPUs); n++ {
			args = append(args, "-device", fmt.Sprintf("%s,id=%s,socket-id=%d,core-id=0,thread-id=0", s.CPUDriver(), CPUDeviceID(n), n))
		}
	} else {
		args = append(args, "-smp", strconv.Itoa(int(s.CPUs)))
	}
	m := strconv.FormatInt(s.MemoryMiB, 10) + "M"
	if s.MemoryHotplug() {
		m += ",maxmem=" + strconv.FormatInt(s.MaxMemoryMiB, 10) + "M"
	}
	return append(args, "-m", m)
}

// memoryDeviceArgs adds the virtio-mem device, empty at start: the runner plugs memory into it.
func (s Spec) memoryDeviceArgs() []string {
	if !s.MemoryHotplug() {
		return nil
	}
	backend := "memory-backend-ram"
	if s.sharedMemory() { // hot-added memory is the guest's too: virtiofsd must map it as well
		backend = "memory-backend-memfd,share=on"
	}
	return []string{
		"-object", fmt.Sprintf("%s,id=%s,size=%dM", backend, virtioMemBackend, s.MaxMemoryMiB-s.MemoryMiB),
		"-device", fmt.Sprintf("virtio-mem-pci,id=%s,memdev=%s,block-size=%dM,requested-size=0", VirtioMemID, virtioMemBackend, vmv1.MemoryHotplugBlockMiB),
	}
}
