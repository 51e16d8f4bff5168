// Package kvm answers "is KVM usable on this node, and why not", for everyone who asks: the
// runner before it boots a guest under kvm, the node agent for the node's HypervisorNode, the
// device plugin for the health of devices.virtpod.io/kvm, and the ProviderClass controller for
// which nodes fit.
//
// Some hosts expose a /dev/kvm that opens and creates vCPUs but cannot run an ordinary guest
// (for example kvm-pvm, a paravirtual KVM for nested use). Checking that the device opens is
// therefore not enough: Probe creates a VM with one page of memory, runs a few instructions in
// real mode and in 64-bit long mode that write a known byte to an I/O port and halt, and checks
// the guest did exactly that within a deadline; judge then weighs the host's KVM module
// (verdict.go). Status turns the result into the API's KVMStatus, and FromReport reads that
// status back from a node's HypervisorNode.
package kvm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// DefaultDevice is the KVM device node.
const DefaultDevice = "/dev/kvm"

// DefaultTimeout bounds the tiny guest's run; a working KVM finishes it in microseconds.
const DefaultTimeout = 2 * time.Second

// Result is what a probe found.
type Result struct {
	// Usable is the verdict: the tiny guest ran to completion and produced the expected output,
	// on a KVM module that runs stock guest kernels.
	Usable bool `json:"usable"`
	// Absent is true when the device node does not exist.
	Absent bool `json:"absent,omitempty"`
	// Reason says why KVM is not usable, or what was verified when it is.
	Reason string `json:"reason"`
	// Device is the device node that was probed.
	Device string `json:"device"`
	// APIVersion is KVM_GET_API_VERSION's answer, 0 when the device did not open.
	APIVersion int `json:"apiVersion"`
	// Stage names the last step reached: open, create-vm, memory, create-vcpu, real-mode,
	// long-mode, kernel-half, run (timed out), host-module, done.
	Stage string `json:"stage"`
	// GuestRan is true when the tiny guest ran in every mode, whatever the host module says.
	GuestRan bool `json:"guestRan"`
	// Module is the loaded KVM vendor module (kvm_intel, kvm_amd, kvm_pvm), "" when unknown.
	Module string `json:"module"`
	// Duration is how long the probe took.
	Duration time.Duration `json:"durationNanoseconds"`
}

func (r Result) String() string {
	if r.Usable {
		return fmt.Sprintf("%s usable: %s", r.Device, r.Reason)
	}
	return fmt.Sprintf("%s not usable (%s): %s", r.Device, r.Stage, r.Reason)
}

// Err returns nil when KVM is usable and an error carrying the reason otherwise.
func (r Result) Err() error {
	if r.Usable {
		return nil
	}
	return errors.New(r.String())
}

// Options tune a probe; the zero value probes /dev/kvm with DefaultTimeout.
type Options struct {
	Device  string
	Timeout time.Duration
	// SysModule is where loaded kernel modules are listed; default /sys/module.
	SysModule string
}

// Probe runs the tiny guest. It never blocks longer than the timeout (or ctx) plus a short
// grace: a vCPU that does not come back is interrupted with a signal to its thread, and if even
// that fails the thread is abandoned and the result says so.
func Probe(ctx context.Context, opts Options) Result {
	if opts.Device == "" {
		opts.Device = DefaultDevice
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	start := time.Now()
	res := Result{Device: opts.Device, Stage: "open"}
	if _, err := os.Stat(opts.Device); err != nil {
		res.Absent = errors.Is(err, fs.ErrNotExist)
		res.Reason = fmt.Sprintf("%v (is the KVM device mapped into the container?)", err)
		res.Duration = time.Since(start)
		return res
	}
	if opts.SysModule == "" {
		opts.SysModule = "/sys/module"
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	res = runTinyGuest(ctx, res)
	res.GuestRan = res.Usable
	res.Module = vendorModule(opts.SysModule)
	res = judge(res)
	res.Duration = time.Since(start)
	return res
}

// vendorModule names the KVM vendor module that serves /dev/kvm. A hardware module wins when
// one is loaded, so a host that loads kvm_pvm beside kvm_intel is not misjudged.
func vendorModule(sysModule string) string {
	for _, m := range []string{"kvm_intel", "kvm_amd", "kvm_pvm"} {
		if _, err := os.Stat(filepath.Join(sysModule, m)); err == nil {
			return m
		}
	}
	return ""
}
