package kvm

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

// A mode puts the vCPU into one CPU mode with code that computes probeByte (so the byte proves
// execution, not a constant copied by the host), writes it to probePort and halts.
//
// Both modes matter: a paravirtual KVM such as kvm-pvm runs real-mode code (the kernel's setup
// stage prints) but cannot run an ordinary 64-bit kernel, which is exactly what a guest kernel
// does after decompression.
type mode struct {
	name  string
	setup func(cpu int, mem []byte) string
}

var modes = []mode{
	{"real-mode", setupReal},
	{"long-mode", func(cpu int, mem []byte) string { return setupLong(cpu, mem, 0) }},
	{"kernel-half", func(cpu int, mem []byte) string { return setupLong(cpu, mem, kernelBase) }},
}

const (
	realCodeAddr = 0x1000
	longCodeAddr = 0x8000
	pml4Addr     = 0x2000
	pdptAddr     = 0x3000
	pdAddr       = 0x4000
	pdptHighAddr = 0x5000
	pdHighAddr   = 0x6000

	// kernelBase is where x86-64 Linux links its kernel text (__START_KERNEL_map + 16 MiB).
	kernelBase = 0xffffffff81000000
)

var realCode = []byte{
	0xb0, probeByte - 1, // mov al, 0x29
	0xfe, 0xc0, // inc al
	0xba, probePort, 0x00, // mov dx, 0x10
	0xee, // out dx, al
	0xf4, // hlt
}

var longCode = []byte{
	0x48, 0xc7, 0xc0, probeByte - 2, 0, 0, 0, // mov rax, 0x28
	0x48, 0x83, 0xc0, 0x02, // add rax, 2
	0x66, 0xba, probePort, 0x00, // mov dx, 0x10
	0xee, // out dx, al
	0xf4, // hlt
}

func setupReal(cpu int, mem []byte) string {
	copy(mem[realCodeAddr:], realCode)
	var sregs kvmSregs
	if _, err := ioctl(cpu, kvmGetSregs, uintptr(unsafe.Pointer(&sregs))); err != nil {
		return fmt.Sprintf("KVM_GET_SREGS: %v", err)
	}
	sregs.cs.base, sregs.cs.selector = 0, 0
	if _, err := ioctl(cpu, kvmSetSregs, uintptr(unsafe.Pointer(&sregs))); err != nil {
		return fmt.Sprintf("KVM_SET_SREGS (real mode): %v", err)
	}
	regs := kvmRegs{rip: realCodeAddr, rflags: 0x2}
	if _, err := ioctl(cpu, kvmSetRegs, uintptr(unsafe.Pointer(&regs))); err != nil {
		return fmt.Sprintf("KVM_SET_REGS: %v", err)
	}
	return ""
}

// setupLong enters 64-bit long mode directly through the special registers, with an identity
// map of the first 2 MiB, the way KVM's own selftests do.
func setupLong(cpu int, mem []byte, virtBase uint64) string {
	copy(mem[longCodeAddr:], longCode)
	const present, rw, huge = 1, 2, 0x80
	binary.LittleEndian.PutUint64(mem[pml4Addr:], pdptAddr|present|rw)
	binary.LittleEndian.PutUint64(mem[pdptAddr:], pdAddr|present|rw)
	binary.LittleEndian.PutUint64(mem[pdAddr:], 0|present|rw|huge)
	// The same 2 MiB again at kernelBase: PML4[511] -> PDPT[510] -> PD[8].
	binary.LittleEndian.PutUint64(mem[pml4Addr+511*8:], pdptHighAddr|present|rw)
	binary.LittleEndian.PutUint64(mem[pdptHighAddr+510*8:], pdHighAddr|present|rw)
	binary.LittleEndian.PutUint64(mem[pdHighAddr+8*8:], 0|present|rw|huge)

	var sregs kvmSregs
	if _, err := ioctl(cpu, kvmGetSregs, uintptr(unsafe.Pointer(&sregs))); err != nil {
		return fmt.Sprintf("KVM_GET_SREGS: %v", err)
	}
	const (
		cr0PE, cr0MP, cr0ET, cr0NE, cr0WP, cr0AM, cr0PG = 1, 2, 0x10, 0x20, 0x10000, 0x40000, 0x80000000
		cr4PAE                                          = 0x20
		eferLME, eferLMA                                = 0x100, 0x400
	)
	sregs.cr3 = pml4Addr
	sregs.cr4 = cr4PAE
	sregs.cr0 = cr0PE | cr0MP | cr0ET | cr0NE | cr0WP | cr0AM | cr0PG
	sregs.efer = eferLME | eferLMA
	code := kvmSegment{base: 0, limit: 0xffffffff, selector: 1 << 3, typ: 11, present: 1, s: 1, l: 1, g: 1}
	data := kvmSegment{base: 0, limit: 0xffffffff, selector: 2 << 3, typ: 3, present: 1, s: 1, db: 1, g: 1}
	sregs.cs = code
	sregs.ds, sregs.es, sregs.fs, sregs.gs, sregs.ss = data, data, data, data, data
	if _, err := ioctl(cpu, kvmSetSregs, uintptr(unsafe.Pointer(&sregs))); err != nil {
		return fmt.Sprintf("KVM_SET_SREGS (long mode): %v", err)
	}
	regs := kvmRegs{rip: virtBase + longCodeAddr, rflags: 0x2, rsp: virtBase + 0x7000}
	if _, err := ioctl(cpu, kvmSetRegs, uintptr(unsafe.Pointer(&regs))); err != nil {
		return fmt.Sprintf("KVM_SET_REGS: %v", err)
	}
	return ""
}
