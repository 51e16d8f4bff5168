// Package cloudhypervisor builds a cloud-hypervisor VM configuration and talks to its REST API
// over a unix socket. Field names follow cloud-hypervisor's published OpenAPI description
// (vmm/src/api/openapi/cloud-hypervisor.yaml, API v1).
package cloudhypervisor

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"unicode/utf8"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// VMConfig is the subset of the API's VmConfig the runner sets.
type VMConfig struct {
	CPUs    CPUsConfig     `json:"cpus"`
	Memory  MemoryConfig   `json:"memory"`
	Payload PayloadConfig  `json:"payload"`
	Disks   []DiskConfig   `json:"disks,omitempty"`
	Net     []NetConfig    `json:"net,omitempty"`
	Serial  *ConsoleConfig `json:"serial,omitempty"`
	Console *ConsoleConfig `json:"console,omitempty"`
	Pvpanic bool           `json:"pvpanic,omitempty"`
}

type CPUsConfig struct {
	BootVCPUs int32 `json:"boot_vcpus"`
	MaxVCPUs  int32 `json:"max_vcpus"`
}

type MemoryConfig struct {
	Size int64 `json:"size"` // bytes
	// HotplugSize is how much memory can be added at run time (vm.resize), by HotplugMethod.
	HotplugSize   int64  `json:"hotplug_size,omitempty"`
	HotplugMethod string `json:"hotplug_method,omitempty"` // Acpi or VirtioMem
}

// HotplugVirtioMem is the memory hotplug method the runner uses, as with QEMU (docs/runner.md).
const HotplugVirtioMem = "VirtioMem"

type PayloadConfig struct {
	// Firmware boots the guest from its disk's bootloader, instead of Kernel: a firmware built
	// for cloud-hypervisor (its OVMF build, CLOUDHV.fd, or rust-hypervisor-firmware).
	Firmware  string `json:"firmware,omitempty"`
	Kernel    string `json:"kernel,omitempty"`
	Cmdline   string `json:"cmdline,omitempty"`
	Initramfs string `json:"initramfs,omitempty"`
}

type DiskConfig struct {
	ID           string `json:"id,omitempty"`
	Path         string `json:"path"`
	Readonly     bool   `json:"readonly,omitempty"`
	Direct       bool   `json:"direct,omitempty"`
	ImageType    string `json:"image_type,omitempty"`    // Qcow2 or Raw
	BackingFiles bool   `json:"backing_files,omitempty"` // let a qcow2 overlay open its base
	Serial       string `json:"serial,omitempty"`
}

type NetConfig struct {
	ID  string `json:"id,omitempty"`
	Tap string `json:"tap,omitempty"`
	MAC string `json:"mac,omitempty"`
	MTU int    `json:"mtu,omitempty"`
}

// ConsoleConfig is the API's ConsoleConfig/SerialConfig; Mode is Off, Pty, Tty, File, Socket or Null.
type ConsoleConfig struct {
	Mode   string `json:"mode"`
	Socket string `json:"socket,omitempty"`
	File   string `json:"file,omitempty"`
}

// Spec is what the configuration depends on; it mirrors the QEMU builder's inputs.
type Spec struct {
	// GuestSize is the guest's size; MaxCPUs and MaxMemoryMiB above CPUs and MemoryMiB let
	// vm.resize grow the guest, 0 or equal is a fixed size, configured as before.
	vmv1.GuestSize
	Kernel  string
	Initrd  string
	Cmdline string
	// Firmware, only without a Kernel: the guest boots from its root disk through it.
	Firmware string

	DiskPath   string
	DiskFormat string     // qcow2 or raw
	DirectIO   bool       // O_DIRECT, as QEMU's cache=none
	SeedPath   string     // cloud-init NoCloud seed image (raw), attached read-only after the root disk; "" for none
	Disks      []DataDisk // data disks, after the seed (disks.go)

	TapName string // "" for no network
	MAC     net.HardwareAddr
	MTU     int

	SerialSocket string
}

// Build returns the VM configuration for vm.create. The guest's serial port is served on a unix
// socket, like QEMU's, so the runner handles both providers' consoles the same way; the
// virtio console is off so the guest has one console.
func Build(s Spec) (VMConfig, error) {
	var errs []error
	errs = append(errs, s.GuestSize.Validate(vmv1.SizeWords)...)
	if s.DiskPath == "" || s.SerialSocket == "" {
		errs = append(errs, errors.New("disk path and serial socket are required"))
	}
	switch {
	case s.Kernel == "" && s.Firmware == "":
		errs = append(errs, errors.New("a kernel or a firmware is required"))
	case s.Kernel != "" && s.Firmware != "":
		errs = append(errs, errors.New("a kernel or a firmware, not both"))
	case s.Kernel == "" && (s.Initrd != "" || s.Cmdline != ""):
		errs = append(errs, errors.New("an initrd or kernel command line needs a kernel; a disk's bootloader brings its own"))
	}
	imageType := map[string]string{"qcow2": "Qcow2", "raw": "Raw"}[s.DiskFormat]
	if imageType == "" {
		errs = append(errs, fmt.Errorf("disk format %q: use qcow2 or raw", s.DiskFormat))
	}
	if s.TapName != "" && len(s.MAC) != 6 {
		errs = append(errs, errors.New("a tap device needs the guest's 6-byte MAC"))
	}
	if strings.ContainsAny(s.Cmdline, "\x00\n\r") {
		errs = append(errs, errors.New("kernel command line contains a NUL or newline"))
	}
	if s.MemoryMiB > math.MaxInt64>>20 {
		errs = append(errs, fmt.Errorf("memory %d MiB: too large to count in bytes", s.MemoryMiB))
	}
	// JSON strings are Unicode: encoding/json would turn invalid UTF-8 into U+FFFD, naming
	// another file or changing the command line without a word.
	for _, v := range []string{s.Kernel, s.Initrd, s.Cmdline, s.Firmware, s.DiskPath, s.SeedPath, s.TapName, s.SerialSocket} {
		if !utf8.ValidString(v) {
			errs = append(errs, fmt.Errorf("%q is not UTF-8, which cloud-hypervisor's JSON API cannot carry", v))
		}
	}
	if s.MaxMemoryMiB > math.MaxInt64>>20 {
		errs = append(errs, fmt.Errorf("max memory %d MiB: too large to count in bytes", s.MaxMemoryMiB))
	}
	data, diskErrs := dataDisks(s.Disks)
	errs = append(errs, diskErrs...)
	if err := errors.Join(errs...); err != nil {
		return VMConfig{}, err
	}
	c := VMConfig{
		CPUs:    CPUsConfig{BootVCPUs: s.CPUs, MaxVCPUs: s.CPUs},
		Memory:  MemoryConfig{Size: s.MemoryMiB << 20},
		Payload: PayloadConfig{Firmware: s.Firmware, Kernel: s.Kernel, Initramfs: s.Initrd, Cmdline: s.Cmdline},
		Disks: []DiskConfig{{
			ID: "root", Path: s.DiskPath, Direct: s.DirectIO, ImageType: imageType,
			BackingFiles: s.DiskFormat == "qcow2",
		}},
		Serial:  &ConsoleConfig{Mode: "Socket", Socket: s.SerialSocket},
		Console: &ConsoleConfig{Mode: "Off"},
		Pvpanic: true,
	}
	if s.CPUHotplug() {
		c.CPUs.MaxVCPUs = s.MaxCPUs
	}
	if s.MemoryHotplug() {
		c.Memory.HotplugSize, c.Memory.HotplugMethod = (s.MaxMemoryMiB-s.MemoryMiB)<<20, HotplugVirtioMem
	}
	if s.SeedPath != "" {
		c.Disks = append(c.Disks, DiskConfig{ID: "cidata", Path: s.SeedPath, Readonly: true, Direct: s.DirectIO, ImageType: "Raw"})
	}
	c.Disks = append(c.Disks, data...)
	if s.TapName != "" {
		c.Net = []NetConfig{{ID: "net0", Tap: s.TapName, MAC: s.MAC.String(), MTU: s.MTU}}
	}
	return c, nil
}

// Args is the cloud-hypervisor command line: only the API socket, everything else goes through
// vm.create so that user strings never reach cloud-hypervisor's own option parser. The socket
// is a bare path: cloud-hypervisor reads --api-socket as path=/fd= options and, when that
// fails, takes the whole value as the path. A value starting with '/' or "./" always fails, so
// the path arrives verbatim, where "path=" + a path with a comma could add an fd= option.
func Args(apiSocket string) []string {
	if !strings.HasPrefix(apiSocket, "/") {
		apiSocket = "./" + apiSocket
	}
	return []string{"--api-socket", apiSocket}
}
