// Package runnerconfig is the contract between the controller and the runner: the controller
// renders a Config into the runner container's command-line flags and the runner parses them
// back. Flags keep the configuration readable in `kubectl get pod -o yaml`; nothing in it is
// encoded and no secret ever appears in it (secrets are mounted files named by path).
package runnerconfig

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Providers (the API's names) and accelerations the runner knows.
const (
	ProviderQEMU            = string(vmv1.ProviderQEMU)
	ProviderCloudHypervisor = string(vmv1.ProviderCloudHypervisor)

	AccelKVM      = "kvm"
	AccelEmulated = "tcg"

	// Firmware a guest without --kernel boots through, from its root disk's bootloader.
	FirmwareBIOS = "bios" // SeaBIOS
	FirmwareUEFI = "uefi" // OVMF, secure boot off
)

// Defaults of the settings the controller need not pass: the runner's flag defaults, and what
// pkg/podspec mounts and probes.
const (
	DefaultStateDir = "/var/run/virtpod"
	// DefaultHTTPAddr is a unix socket in the state directory, not a TCP port: the runner
	// relays every declared guest port from the pod's loopback (docs/runner.md), so any TCP
	// port it took for itself could be one a guest wants.
	DefaultHTTPAddr           = "unix:runner.sock"
	DefaultGracePeriodSeconds = 30
	DefaultNetwork            = vmv1.NetworkPod
	DefaultFirmware           = FirmwareBIOS // without --kernel
	// DefaultControlSocket is where the runner serves its control API (docs/runner.md): the
	// directory the device plugin mounts, which only the node agent reaches from the host.
	DefaultControlSocket = "/run/virtpod/control/runner.sock"
)

// GuestAgentFlag is GuestAgent's flag: the node agent asks only the runners that have it, and
// the controller tells from it whether the guest has an agent channel.
const GuestAgentFlag = "--guest-agent"

// CloudInitUserDataFlag names the seed's user-data file: a guest with a seed runs cloud-init,
// whose end the node agent watches for.
const CloudInitUserDataFlag = "--cloud-init-user-data"

// Port is a guest port published at the pod IP.
type Port struct {
	Name     string
	Port     int32
	Protocol string // TCP or UDP
}

// Config is everything the runner needs to boot one guest.
type Config struct {
	Name         string // VM name, used as the guest hostname
	Provider     string // qemu | cloud-hypervisor
	Acceleration string // kvm | tcg
	// GuestSize is the guest's size (--cpus, --memory-mib); MaxCPUs and MaxMemoryMiB above them
	// (--max-cpus, --max-memory-mib) make it resizable at run time through the control socket.
	vmv1.GuestSize
	// ControlSocket is the unix socket of the control API; "" serves none. Its flag defaults to
	// DefaultControlSocket, and Args leaves the default out.
	ControlSocket string
	// Incoming makes this runner a live migration's target: QEMU waits for the guest on
	// <control dir>/migrate-in.sock instead of booting it (docs/runner.md).
	Incoming bool
	// SuspendTo is where a suspend (PUT /v1/suspend) writes the guest's state, memory and
	// devices: a file on a volume that outlives the pod. "" serves no suspend.
	SuspendTo string
	// ResumeFrom starts the guest from a state a suspend wrote instead of booting it.
	ResumeFrom string
	// Machine is QEMU's machine type: "" is q35, the newest this QEMU knows; a versioned one
	// (pc-q35-7.2) keeps the guest's hardware across QEMU versions, so a guest started on
	// QEMU 7.2 can migrate onto QEMU 10.0 (provider qemu only).
	Machine string
	// GuestAgent gives the guest a channel for qemu-guest-agent (provider qemu only). A flag,
	// not always on: a migration target copies its source's flags, so both sides build the
	// same devices even when the source's runner predates the channel.
	GuestAgent bool
	// Display is the guest's display (display.go): DisplayVNC, or DisplayNone (the flag's
	// default, and Defaults' for an empty one).
	Display string

	Kernel      string // path of the kernel inside the pod; "" boots the root disk through Firmware
	Firmware    string // bios or uefi, only without Kernel
	Initrd      string // optional path of an initramfs; ignored when the file does not exist
	KernelArgs  string
	RootDisk    string // the read-only base disk (raw or qcow2), or a VM image's /disk holding it
	DiskSizeMiB int64  // size of the writable overlay; 0 keeps the base size

	Ports []Port

	StateDir           string // writable directory for sockets and the disk overlay
	HTTPAddr           string // address of the runner's HTTP endpoint (see HTTPEndpoint)
	GracePeriodSeconds int64  // how long a guest gets to power off before QEMU is stopped
	// Network is the guest's network (--network, which spells it in lower case: see
	// vmv1.NetworkMode's Flag): NetworkPod takes over the pod's interface; NetworkMasquerade
	// keeps a fixed address behind NAT in the pod (it survives a move to another pod, so a
	// migration can take it along); NetworkNone gives the guest no network.
	Network vmv1.NetworkMode

	// A cloud-init NoCloud seed disk, attached when CloudInitUserData is set. The data are
	// files the kubelet mounted from a Secret; only their paths are flags.
	InstanceID           string // the seed's instance-id: the VM's UID
	CloudInitUserData    string // path of the user-data file
	CloudInitNetworkData string // optional path of a network-config file

	// ReadinessProbe, when set, is checked at the pod IP; the runner is ready only while it passes.
	ReadinessProbe Probe
	// Disks kept apart from the overlay root disk (disks.go): the data disks, in the guest's
	// order, and the root disk when it lives on a claim (then RootDisk, if set, fills it once).
	Disks      []Disk
	RootVolume *Disk
	// HotplugSlots is how many hotplug slots the guest has (disks.go): disks with Hotplug sit
	// on one, and the runner attaches more to a running guest (docs/hotplug.md).
	HotplugSlots int
	// Filesystems are the directories shared into the guest through virtio-fs (filesystems.go).
	Filesystems []Filesystem
}

// Defaults fills what the caller left empty.
func (c *Config) Defaults() {
	if c.Provider == "" {
		c.Provider = ProviderQEMU
	}
	if c.Acceleration == "" {
		c.Acceleration = AccelKVM
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.Network == "" {
		c.Network = DefaultNetwork
	}
	if c.Kernel == "" && c.Firmware == "" {
		c.Firmware = DefaultFirmware
	}
	if c.GracePeriodSeconds == 0 {
		c.GracePeriodSeconds = DefaultGracePeriodSeconds
	}
	if c.Display == "" {
		c.Display = DisplayNone
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = "TCP"
		}
	}
}

// Validate reports the first field that is missing or out of range, by its flag name.
func (c *Config) Validate() error {
	var errs []error
	switch c.Provider {
	case ProviderQEMU, ProviderCloudHypervisor:
	default:
		errs = append(errs, fmt.Errorf("--provider: %q is not a provider; use qemu or cloud-hypervisor", c.Provider))
	}
	switch c.Acceleration {
	case AccelKVM, AccelEmulated:
	default:
		errs = append(errs, fmt.Errorf("--accel: %q is not an acceleration; use kvm or tcg", c.Acceleration))
	}
	errs = append(errs, c.GuestSize.Validate(sizeFlags)...)
	errs = append(errs, c.validateControl()...)
	if c.Machine != "" && !vmv1.MachineType.MatchString(c.Machine) {
		errs = append(errs, fmt.Errorf("--machine: %q is not a q35 machine type; use q35 or a versioned one such as pc-q35-7.2", c.Machine))
	}
	if c.Machine != "" && c.Provider != ProviderQEMU {
		errs = append(errs, errors.New("--machine: only for provider qemu"))
	}
	if c.GuestAgent && c.Provider != ProviderQEMU {
		errs = append(errs, errors.New("--guest-agent: only for provider qemu (cloud-hypervisor has no virtio-serial channel)"))
	}
	errs = append(errs, c.validateDisplay()...)
	if c.Kernel == "" {
		switch c.Firmware {
		case FirmwareBIOS, FirmwareUEFI:
		default:
			errs = append(errs, fmt.Errorf("--firmware: %q is not a firmware; without --kernel the root disk boots through bios or uefi", c.Firmware))
		}
		if c.Initrd != "" || c.KernelArgs != "" {
			errs = append(errs, errors.New("--initrd, --kernel-args: need --kernel; a disk that boots through firmware brings its own bootloader and command line"))
		}
	} else if c.Firmware != "" {
		errs = append(errs, errors.New("--firmware: only without --kernel (a guest boots from a kernel or from its disk)"))
	}
	if c.RootDisk == "" && c.RootVolume == nil {
		errs = append(errs, errors.New("--root-disk: the path of the root-disk image is required (or --root-volume, a root disk kept on a claim)"))
	}
	errs = append(errs, c.validateDisks()...)
	errs = append(errs, c.validateFilesystems()...)
	if c.DiskSizeMiB < 0 {
		errs = append(errs, fmt.Errorf("--disk-size-mib: must not be negative, got %d (0 keeps the image size)", c.DiskSizeMiB))
	}
	switch c.Network {
	case vmv1.NetworkPod, vmv1.NetworkMasquerade, vmv1.NetworkNone:
	default:
		errs = append(errs, fmt.Errorf("--network: %q is not a network mode; use pod, masquerade or none", c.Network))
	}
	if c.CloudInitUserData == "" {
		if c.CloudInitNetworkData != "" {
			errs = append(errs, errors.New("--cloud-init-network-data: needs --cloud-init-user-data, the seed's user-data file"))
		}
	} else if c.InstanceID == "" {
		errs = append(errs, errors.New("--instance-id: required with --cloud-init-user-data (the seed's instance-id; the controller passes the VM's UID)"))
	}
	if c.ReadinessProbe.IsSet() {
		if err := c.ReadinessProbe.validate(); err != nil {
			errs = append(errs, err)
		}
		if c.Network == vmv1.NetworkNone {
			errs = append(errs, errors.New("--readiness-probe: needs --network=pod or masquerade (the probe reaches the guest on its network)"))
		}
	}
	for _, p := range c.Ports {
		if p.Port < 1 || p.Port > 65535 || (p.Protocol != "TCP" && p.Protocol != "UDP") || p.Name == "" {
			errs = append(errs, fmt.Errorf("--port: %q must be NAME:PORT/TCP or NAME:PORT/UDP with PORT in 1-65535", p.String()))
		}
	}
	return errors.Join(errs...)
}

// sizeFlags names the size's flags in the errors of Validate.
var sizeFlags = vmv1.SizeNames{CPUs: "--cpus", MaxCPUs: "--max-cpus", Memory: "--memory-mib", MaxMemory: "--max-memory-mib"}

// validateControl checks the control socket a resizable guest is resized through, and a
// migration's target, which receives on it.
func (c *Config) validateControl() []error {
	var errs []error
	if c.ControlSocket != "" && !filepath.IsAbs(c.ControlSocket) {
		errs = append(errs, fmt.Errorf("--control-socket: %q must be an absolute path, or empty for none", c.ControlSocket))
	}
	if c.Incoming {
		if c.ControlSocket == "" {
			errs = append(errs, errors.New("--incoming: needs --control-socket (the stream arrives on migrate-in.sock in its directory)"))
		}
		if c.Provider != ProviderQEMU {
			errs = append(errs, fmt.Errorf("--incoming: only provider %s can receive a live migration, not %q", ProviderQEMU, c.Provider))
		}
	}
	for _, f := range []struct{ flag, path string }{{"--suspend-to", c.SuspendTo}, {"--resume-from", c.ResumeFrom}} {
		switch {
		case f.path == "":
		case !filepath.IsAbs(f.path):
			errs = append(errs, fmt.Errorf("%s: %q must be an absolute path", f.flag, f.path))
		case c.Provider != ProviderQEMU:
			errs = append(errs, fmt.Errorf("%s: only provider %s can save and load a guest's state, not %q", f.flag, ProviderQEMU, c.Provider))
		case c.RootVolume == nil || slices.ContainsFunc(c.Disks, func(d Disk) bool { return d.Kind == DiskEmpty }):
			errs = append(errs, fmt.Errorf("%s: every writable disk must be a volume (--root-volume, no empty disks): a saved state must find the disks it was saved with", f.flag))
		}
	}
	if c.ResumeFrom != "" && c.Incoming {
		errs = append(errs, errors.New("--resume-from and --incoming: a guest arrives one way, from a saved state or from a live migration"))
	}
	return errs
}

// HTTPEndpoint resolves an --http-addr: "unix:PATH" is a unix socket, PATH relative to the
// state directory unless absolute; anything else is a TCP host:port.
func HTTPEndpoint(httpAddr, stateDir string) (network, address string) {
	path, ok := strings.CutPrefix(httpAddr, "unix:")
	if !ok {
		return "tcp", httpAddr
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(stateDir, path)
	}
	return "unix", path
}

func (p Port) String() string { return fmt.Sprintf("%s:%d/%s", p.Name, p.Port, p.Protocol) }

// ParsePort reads NAME:PORT/PROTOCOL. It cuts at the last ':', since PORT/PROTOCOL has none,
// so every name String writes reads back as it was.
func ParsePort(s string) (Port, error) {
	i := strings.LastIndex(s, ":")
	if i < 0 {
		return Port{}, fmt.Errorf("port %q: want NAME:PORT/PROTOCOL", s)
	}
	name, rest := s[:i], s[i+1:]
	num, proto, _ := strings.Cut(rest, "/")
	n, err := strconv.ParseInt(num, 10, 32)
	if err != nil {
		return Port{}, fmt.Errorf("port %q: %q is not a number", s, num)
	}
	if proto == "" {
		proto = "TCP"
	}
	return Port{Name: name, Port: int32(n), Protocol: proto}, nil
}

// Args renders the configuration as runner flags, in a stable order.
func (c Config) Args() []string {
	args := []string{
		"--name=" + c.Name,
		"--provider=" + c.Provider,
		"--accel=" + c.Acceleration,
		"--cpus=" + strconv.Itoa(int(c.CPUs)),
		"--memory-mib=" + strconv.FormatInt(c.MemoryMiB, 10),
	}
	if c.MaxCPUs != 0 {
		args = append(args, "--max-cpus="+strconv.Itoa(int(c.MaxCPUs)))
	}
	if c.MaxMemoryMiB != 0 {
		args = append(args, "--max-memory-mib="+strconv.FormatInt(c.MaxMemoryMiB, 10))
	}
	if c.ControlSocket != DefaultControlSocket {
		args = append(args, "--control-socket="+c.ControlSocket)
	}
	if c.Incoming {
		args = append(args, "--incoming")
	}
	if c.SuspendTo != "" {
		args = append(args, "--suspend-to="+c.SuspendTo)
	}
	if c.ResumeFrom != "" {
		args = append(args, "--resume-from="+c.ResumeFrom)
	}
	if c.Machine != "" {
		args = append(args, "--machine="+c.Machine)
	}
	if c.GuestAgent {
		args = append(args, GuestAgentFlag)
	}
	if c.Display != "" && c.Display != DisplayNone { // none is the flag's default: the argv of old
		args = append(args, DisplayFlag+"="+c.Display)
	}
	if c.Kernel != "" {
		args = append(args, "--kernel="+c.Kernel)
	}
	if c.Firmware != "" {
		args = append(args, "--firmware="+c.Firmware)
	}
	if c.Initrd != "" {
		args = append(args, "--initrd="+c.Initrd)
	}
	if c.KernelArgs != "" {
		args = append(args, "--kernel-args="+c.KernelArgs)
	}
	if c.RootDisk != "" {
		args = append(args, "--root-disk="+c.RootDisk)
	}
	if c.DiskSizeMiB > 0 {
		args = append(args, "--disk-size-mib="+strconv.FormatInt(c.DiskSizeMiB, 10))
	}
	ports := append([]Port(nil), c.Ports...)
	sort.SliceStable(ports, func(i, j int) bool { return ports[i].Name < ports[j].Name })
	for _, p := range ports {
		args = append(args, "--port="+p.String())
	}
	args = append(args,
		"--state-dir="+c.StateDir,
		"--http-addr="+c.HTTPAddr,
		"--grace-period-seconds="+strconv.FormatInt(c.GracePeriodSeconds, 10),
		"--network="+c.Network.Flag(),
	)
	if c.InstanceID != "" {
		args = append(args, "--instance-id="+c.InstanceID)
	}
	if c.CloudInitUserData != "" {
		args = append(args, CloudInitUserDataFlag+"="+c.CloudInitUserData)
	}
	if c.CloudInitNetworkData != "" {
		args = append(args, "--cloud-init-network-data="+c.CloudInitNetworkData)
	}
	if c.ReadinessProbe.IsSet() {
		args = append(args, "--readiness-probe="+c.ReadinessProbe.String())
	}
	return append(append(args, c.diskArgs()...), c.filesystemArgs()...)
}

// portList collects repeated --port flags.
type portList struct{ ports *[]Port }

func (l portList) String() string {
	if l.ports == nil {
		return ""
	}
	s := make([]string, len(*l.ports))
	for i, p := range *l.ports {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func (l portList) Set(v string) error {
	p, err := ParsePort(v)
	if err != nil {
		return err
	}
	*l.ports = append(*l.ports, p)
	return nil
}

// Bind registers the configuration's flags on fs, so a command (cobra or flag) can parse them.
func (c *Config) Bind(fs *flag.FlagSet) {
	fs.StringVar(&c.Name, "name", "", "VM name; the guest's hostname")
	fs.StringVar(&c.Provider, "provider", ProviderQEMU, "hypervisor: qemu or cloud-hypervisor")
	fs.StringVar(&c.Acceleration, "accel", AccelKVM, "acceleration: kvm, or tcg for explicit software emulation")
	fs.Var(int32Value{&c.CPUs}, "cpus", "guest vCPUs")
	fs.Int64Var(&c.MemoryMiB, "memory-mib", 0, "guest memory in MiB")
	fs.Var(int32Value{&c.MaxCPUs}, "max-cpus", "most vCPUs the guest can be resized to at run time (0: --cpus, not resizable)")
	fs.Int64Var(&c.MaxMemoryMiB, "max-memory-mib", 0, "most memory in MiB the guest can be resized to at run time, a multiple of 128 like --memory-mib (0: --memory-mib, not resizable)")
	fs.StringVar(&c.ControlSocket, "control-socket", DefaultControlSocket, "unix socket of the control API (resize), created 0600; empty: none")
	fs.BoolVar(&c.Incoming, "incoming", false, "be a live migration's target: QEMU receives the running guest on migrate-in.sock next to --control-socket instead of booting it (provider qemu)")
	fs.StringVar(&c.SuspendTo, "suspend-to", "", "where a suspend (PUT /v1/suspend on the control socket) writes the guest's state: a file on a volume that outlives the pod; every writable disk must be a volume (provider qemu)")
	fs.StringVar(&c.ResumeFrom, "resume-from", "", "start the guest from the state a suspend wrote at this path instead of booting it (provider qemu)")
	fs.StringVar(&c.Machine, "machine", "", "QEMU's machine type: q35 (the default, this QEMU's newest) or a versioned one such as pc-q35-7.2, which a guest keeps across QEMU versions")
	fs.BoolVar(&c.GuestAgent, "guest-agent", false, "give the guest a virtio-serial channel for qemu-guest-agent, served on qga.sock in --state-dir (provider qemu)")
	fs.StringVar(&c.Display, "display", DisplayNone, DisplayVNC+": a VGA card whose screen is served over VNC on vnc.sock in --state-dir and captured by GET /v1/screenshot (provider qemu); "+DisplayNone+": no display")
	fs.StringVar(&c.Kernel, "kernel", "", "path of the guest kernel; without it the root disk boots through --firmware")
	fs.StringVar(&c.Firmware, "firmware", "", "without --kernel: "+FirmwareBIOS+" (SeaBIOS, the default) or "+FirmwareUEFI+" (OVMF, secure boot off)")
	fs.StringVar(&c.Initrd, "initrd", "", "path of the guest initramfs (optional; skipped when absent)")
	fs.StringVar(&c.KernelArgs, "kernel-args", "", "guest kernel command line")
	fs.StringVar(&c.RootDisk, "root-disk", "", "the read-only root disk (raw or qcow2): its path, or a VM image's /disk directory holding root.img or one .qcow2, .img or .raw file")
	fs.Int64Var(&c.DiskSizeMiB, "disk-size-mib", 0, "size of the writable root disk in MiB (0 keeps the image size)")
	fs.Var(portList{&c.Ports}, "port", "guest port NAME:PORT/PROTOCOL published at the pod IP (repeatable)")
	fs.StringVar(&c.StateDir, "state-dir", DefaultStateDir, "writable directory for sockets and the disk overlay")
	fs.StringVar(&c.HTTPAddr, "http-addr", DefaultHTTPAddr, "address of the runner's HTTP endpoint: unix:PATH (relative to --state-dir) or HOST:PORT")
	fs.Int64Var(&c.GracePeriodSeconds, "grace-period-seconds", DefaultGracePeriodSeconds, "seconds a guest gets to power off after SIGTERM")
	c.Network = DefaultNetwork
	fs.Var(networkValue{&c.Network}, "network", vmv1.NetworkPod.Flag()+": the guest takes over the pod's interface and IP; "+
		vmv1.NetworkMasquerade.Flag()+": the guest keeps 10.0.2.2 behind NAT, its --port ports forwarded from the pod IP (migratable); "+vmv1.NetworkNone.Flag()+": no network")
	fs.StringVar(&c.InstanceID, "instance-id", "", "the cloud-init seed's instance-id (the VM's UID)")
	fs.StringVar(&c.CloudInitUserData, "cloud-init-user-data", "", "path of a user-data file: attach a cloud-init NoCloud seed disk (label cidata) built from it")
	fs.StringVar(&c.CloudInitNetworkData, "cloud-init-network-data", "", "path of a network-config file for the seed (optional)")
	fs.Var(probeValue{&c.ReadinessProbe}, "readiness-probe", "guest readiness probe at the pod IP: tcp:PORT (a connection) or http:PORT/PATH (a GET answered 2xx or 3xx); checked every 2s, 1s timeout")
	c.bindDisks(fs)
	c.bindFilesystems(fs)
}

// networkValue is --network: a mode in its flag spelling (vmv1.ParseNetworkFlag). An empty
// value leaves the mode unset, for Defaults to fill, as it always has.
type networkValue struct{ p *vmv1.NetworkMode }

func (v networkValue) String() string {
	if v.p == nil {
		return ""
	}
	return v.p.Flag()
}

// Type is what the runner's help (pflag) calls the flag's value: a string, as it always has.
func (networkValue) Type() string { return "string" }

func (v networkValue) Set(s string) error {
	if s == "" {
		*v.p = ""
		return nil
	}
	m, err := vmv1.ParseNetworkFlag(s)
	if err != nil {
		return err
	}
	*v.p = m
	return nil
}

type int32Value struct{ p *int32 }

func (v int32Value) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.Itoa(int(*v.p))
}

func (v int32Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return err
	}
	*v.p = int32(n)
	return nil
}

// Parse reads runner flags into a Config the way virtpod-runner does (Bind, Defaults, then
// Validate); anything that is not a configuration flag is an error. The node agent reads a
// runner pod's arguments, which the controller wrote, with it.
func Parse(args []string) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Bind(fs)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	c.Defaults()
	return c, c.Validate()
}
