package runnerconfig

import (
	"flag"
	"fmt"
	"strconv"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// The live-resize flags, as the runner side (resize-runner's branch) defines them in config.go:
// same fields, flag names, defaults and rendering, so either copy merges. On merge keep that
// one and drop this file.

// DefaultControlSocket is where the runner serves its control API (live resize): the directory
// the device plugin mounts for devices.virtpod.io/control, which only the node agent reaches
// from the host.
const DefaultControlSocket = vmv1.ControlDir + "/" + vmv1.ControlSocketName

// resizeArgs renders the live-resize flags. A guest without room to grow gets no --max-* flag,
// so its hypervisor starts as it always did; the default control socket is left to the flag's
// default, and "" (none) is said explicitly.
func (c Config) resizeArgs() []string {
	var args []string
	if c.MaxCPUs != 0 {
		args = append(args, "--max-cpus="+strconv.Itoa(int(c.MaxCPUs)))
	}
	if c.MaxMemoryMiB != 0 {
		args = append(args, "--max-memory-mib="+strconv.FormatInt(c.MaxMemoryMiB, 10))
	}
	if c.ControlSocket != DefaultControlSocket {
		args = append(args, "--control-socket="+c.ControlSocket)
	}
	return args
}

func (c *Config) bindResize(fs *flag.FlagSet) {
	fs.Var(int32Value{&c.MaxCPUs}, "max-cpus", "most vCPUs the guest can be resized to at run time (0: --cpus, not resizable)")
	fs.Int64Var(&c.MaxMemoryMiB, "max-memory-mib", 0, "most memory in MiB the guest can be resized to at run time, a multiple of 128 like --memory-mib (0: --memory-mib, not resizable)")
	fs.StringVar(&c.ControlSocket, "control-socket", DefaultControlSocket, "unix socket of the control API (resize), created 0600; empty: none")
}

func (c *Config) validateResize() []error {
	var errs []error
	if c.MaxCPUs != 0 && (c.MaxCPUs < c.CPUs || c.MaxCPUs > 255) {
		errs = append(errs, fmt.Errorf("--max-cpus: %d must be between --cpus (%d) and 255, or 0 for a fixed count", c.MaxCPUs, c.CPUs))
	}
	if c.MaxMemoryMiB != 0 && c.MaxMemoryMiB < c.MemoryMiB {
		errs = append(errs, fmt.Errorf("--max-memory-mib: %d must be at least --memory-mib (%d), or 0 for a fixed size", c.MaxMemoryMiB, c.MemoryMiB))
	}
	if block := vmv1.MemoryHotplugBlock >> 20; c.MaxMemoryMiB > c.MemoryMiB && (c.MemoryMiB%block != 0 || c.MaxMemoryMiB%block != 0) {
		errs = append(errs, fmt.Errorf("--memory-mib, --max-memory-mib: %d and %d must be multiples of %d (the memory block) when the guest is resizable", c.MemoryMiB, c.MaxMemoryMiB, block))
	}
	return errs
}
