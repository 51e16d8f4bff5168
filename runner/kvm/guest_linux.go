package kvm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// KVM ioctl numbers from <linux/kvm.h>; x/sys/unix does not define them.
const (
	kvmGetAPIVersion       = 0xAE00
	kvmCreateVM            = 0xAE01
	kvmGetVCPUMmapSize     = 0xAE04
	kvmCreateVCPU          = 0xAE41
	kvmSetUserMemoryRegion = 0x4020AE46
	kvmSetTSSAddr          = 0xAE47
	kvmRun                 = 0xAE80
	kvmSetRegs             = 0x4090AE82
	kvmGetSregs            = 0x8138AE83
	kvmSetSregs            = 0x4138AE84

	kvmExitIO        = 2
	kvmExitHLT       = 5
	kvmExitShutdown  = 8
	kvmExitFailEntry = 9
	kvmExitIntr      = 10
	kvmExitInternal  = 17

	// kvm_run field offsets.
	runImmediateExit = 1
	runExitReason    = 8
	runIO            = 32 // union: direction u8, size u8, port u16, count u32, data_offset u64

	guestMemSize = 0x10000
	probePort    = 0x10
	probeByte    = 0x2a
)

type kvmRegs struct {
	rax, rbx, rcx, rdx, rsi, rdi, rsp, rbp uint64
	r8, r9, r10, r11, r12, r13, r14, r15   uint64
	rip, rflags                            uint64
}

type kvmSegment struct {
	base                           uint64
	limit                          uint32
	selector                       uint16
	typ, present, dpl, db, s, l, g uint8
	avl, unusable, padding         uint8
}

type kvmDtable struct {
	base    uint64
	limit   uint16
	padding [3]uint16
}

type kvmSregs struct {
	cs, ds, es, fs, gs, ss, tr, ldt     kvmSegment
	gdt, idt                            kvmDtable
	cr0, cr2, cr3, cr4, cr8, efer, apic uint64
	interruptBitmap                     [4]uint64
}

type kvmUserspaceMemoryRegion struct {
	slot, flags                              uint32
	guestPhysAddr, memorySize, userspaceAddr uint64
}

func ioctl(fd int, req uintptr, arg uintptr) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if errno != 0 {
		return r, errno
	}
	return r, nil
}

type outcome struct {
	stage, reason string
	usable        bool
	apiVersion    int
}

// runTinyGuest runs the guest on a dedicated OS thread so that a KVM_RUN that never returns can
// be interrupted by signalling exactly that thread.
func runTinyGuest(ctx context.Context, res Result) Result {
	done := make(chan outcome, 1)
	type vcpu struct {
		tid int
		run []byte
	}
	started := make(chan vcpu, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is not unlocked: if KVM left it in a strange state it dies with the goroutine.
		done <- guestRun(res.Device, func(run []byte) { started <- vcpu{unix.Gettid(), run} })
	}()

	var v *vcpu
	for {
		select {
		case o := <-done:
			res.Stage, res.Reason, res.Usable, res.APIVersion = o.stage, o.reason, o.usable, o.apiVersion
			return res
		case s := <-started:
			v = &s
		case <-ctx.Done():
			res.Stage = "run"
			if v == nil {
				res.Reason = fmt.Sprintf("setting up the tiny guest did not finish within the timeout (%v)", ctx.Err())
				return res
			}
			// Ask KVM to return to user space, then kick the thread out of KVM_RUN with a signal
			// the Go runtime already ignores (SIGURG is its preemption signal).
			v.run[runImmediateExit] = 1
			_ = unix.Tgkill(unix.Getpid(), v.tid, unix.SIGURG)
			select {
			case <-done:
				res.Reason = "the tiny guest did not write its byte and halt within the timeout: this KVM creates vCPUs but cannot run guest code (a paravirtual KVM such as kvm-pvm?)"
			case <-time.After(time.Second):
				res.Reason = "the tiny guest did not halt within the timeout and KVM_RUN did not return when interrupted: this KVM cannot run guest code"
			}
			return res
		}
	}
}

func guestRun(device string, onVCPU func(run []byte)) outcome {
	o := outcome{stage: "open"}
	kvm, err := unix.Open(device, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		o.reason = fmt.Sprintf("open: %v", err)
		return o
	}
	defer unix.Close(kvm)
	v, err := ioctl(kvm, kvmGetAPIVersion, 0)
	if err != nil {
		o.reason = fmt.Sprintf("KVM_GET_API_VERSION: %v", err)
		return o
	}
	o.apiVersion = int(v)
	if v != 12 {
		o.reason = fmt.Sprintf("KVM API version %d, want 12", v)
		return o
	}

	o.stage = "create-vm"
	vmfd, err := ioctl(kvm, kvmCreateVM, 0)
	if err != nil {
		o.reason = fmt.Sprintf("KVM_CREATE_VM: %v", err)
		return o
	}
	vm := int(vmfd)
	defer unix.Close(vm)
	// Intel VMX needs a TSS address for real mode; it is harmless elsewhere.
	_, _ = ioctl(vm, kvmSetTSSAddr, 0xfffbd000)

	o.stage = "memory"
	mem, err := unix.Mmap(-1, 0, guestMemSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		o.reason = fmt.Sprintf("mmap guest memory: %v", err)
		return o
	}
	defer unix.Munmap(mem)
	region := kvmUserspaceMemoryRegion{memorySize: guestMemSize, userspaceAddr: uint64(uintptr(unsafe.Pointer(&mem[0])))}
	if _, err := ioctl(vm, kvmSetUserMemoryRegion, uintptr(unsafe.Pointer(&region))); err != nil {
		o.reason = fmt.Sprintf("KVM_SET_USER_MEMORY_REGION: %v", err)
		return o
	}

	o.stage = "create-vcpu"
	cpufd, err := ioctl(vm, kvmCreateVCPU, 0)
	if err != nil {
		o.reason = fmt.Sprintf("KVM_CREATE_VCPU: %v", err)
		return o
	}
	cpu := int(cpufd)
	defer unix.Close(cpu)
	size, err := ioctl(kvm, kvmGetVCPUMmapSize, 0)
	if err != nil {
		o.reason = fmt.Sprintf("KVM_GET_VCPU_MMAP_SIZE: %v", err)
		return o
	}
	run, err := unix.Mmap(cpu, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		o.reason = fmt.Sprintf("mmap kvm_run: %v", err)
		return o
	}
	defer unix.Munmap(run)

	onVCPU(run)
	for _, m := range modes {
		o.stage = m.name
		if reason := m.setup(cpu, mem); reason != "" {
			o.reason = reason
			return o
		}
		if reason := runUntilHalt(cpu, run); reason != "" {
			o.reason = fmt.Sprintf("%s guest: %s", m.name, reason)
			return o
		}
	}
	o.stage, o.usable = "done", true
	o.reason = "a real-mode and a 64-bit long-mode guest each ran, wrote to an I/O port and halted"
	return o
}

// runUntilHalt runs the vCPU until the guest code has written probeByte and halted; it returns
// "" on success and the reason otherwise.
func runUntilHalt(cpu int, run []byte) string {
	sawByte := false
	for i := 0; i < 16; i++ {
		if run[runImmediateExit] != 0 {
			return "interrupted"
		}
		if _, err := ioctl(cpu, kvmRun, 0); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Sprintf("KVM_RUN: %v", err)
		}
		switch reason := binary.LittleEndian.Uint32(run[runExitReason:]); reason {
		case kvmExitIO:
			dir, sz := run[runIO], run[runIO+1]
			port := binary.LittleEndian.Uint16(run[runIO+2:])
			off := binary.LittleEndian.Uint64(run[runIO+8:])
			if dir != 1 || sz != 1 || port != probePort || off >= uint64(len(run)) || run[off] != probeByte {
				return fmt.Sprintf("unexpected I/O exit (dir %d size %d port %#x): KVM did not run the code as written", dir, sz, port)
			}
			sawByte = true
		case kvmExitHLT:
			if !sawByte {
				return "halted without writing its byte: KVM did not run the code as written"
			}
			return ""
		case kvmExitIntr:
			continue
		case kvmExitShutdown:
			return "triple fault (KVM_EXIT_SHUTDOWN)"
		case kvmExitFailEntry:
			return "KVM_EXIT_FAIL_ENTRY: the hardware refused to enter the guest"
		case kvmExitInternal:
			return "KVM_EXIT_INTERNAL_ERROR: KVM could not emulate the guest"
		default:
			return fmt.Sprintf("unexpected KVM exit reason %d", reason)
		}
	}
	return "did not halt after 16 exits"
}
