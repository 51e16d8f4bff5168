package kvm

import (
	"fmt"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// pvmReason is why a node whose KVM is kvm_pvm is not usable.
const pvmReason = "the host's KVM is kvm_pvm (paravirtual KVM, no kvm_intel or kvm_amd loaded): it runs test code but hangs stock guest kernels after decompression; run this VM on a node with hardware virtualization, or set acceleration to Emulated (tcg)"

// judge gives the verdict on what a probe found: the tiny guest must have run, and the module
// serving /dev/kvm must run stock guest kernels. kvm-pvm runs the tiny guests (it emulates real
// mode and runs plain 64-bit code) but hangs an ordinary guest kernel right after
// decompression: it only runs kernels built as PVM guests. No short guest program reproduces
// that hang, so the module decides.
func judge(r Result) Result {
	r.Usable = r.GuestRan
	if r.GuestRan && r.Module == "kvm_pvm" {
		r.Usable, r.Stage, r.Reason = false, "host-module", pvmReason
	}
	return r
}

// Status is a probe's verdict as the node's HypervisorNode reports it: Absent when there is no
// device node, Unusable with the probe's reason when it is there but cannot run a guest (or
// cannot be opened), Usable otherwise.
func (r Result) Status() vmv1.KVMStatus {
	switch {
	case r.Absent:
		return vmv1.KVMStatus{State: vmv1.KVMAbsent, Device: r.Device, Reason: fmt.Sprintf("%s does not exist", r.Device)}
	case r.Usable:
		return vmv1.KVMStatus{State: vmv1.KVMUsable, Device: r.Device}
	default:
		return vmv1.KVMStatus{State: vmv1.KVMUnusable, Device: r.Device, Reason: r.Reason}
	}
}
