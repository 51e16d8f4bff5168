package runnerconfig

import (
	"flag"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// DefaultControlSocket is where the runner serves its control API (live resize): the directory
// the device plugin mounts for devices.virtpod.io/control, which only the node agent reaches
// from the host.
const DefaultControlSocket = vmv1.ControlDir + "/" + vmv1.ControlSocketName

// resizeArgs renders the live-resize flags. A guest without room to grow gets no --max-* flag,
// so its hypervisor starts as it always did; --control-socket is always given, "" for none.
func (c Config) resizeArgs() []string {
	var args []string
	if c.MaxCPUs > c.CPUs {
		args = append(args, "--max-cpus="+strconv.Itoa(int(c.MaxCPUs)))
	}
	if c.MaxMemoryMiB > c.MemoryMiB {
		args = append(args, "--max-memory="+strconv.FormatInt(c.MaxMemoryMiB, 10))
	}
	// Always written, empty too: the flag's default is the socket a runner pod has.
	return append(args, "--control-socket="+c.ControlSocket)
}

func (c *Config) bindResize(fs *flag.FlagSet) {
	fs.Var(int32Value{&c.MaxCPUs}, "max-cpus", "the most vCPUs the guest may grow to live (default: --cpus, no CPU hotplug)")
	fs.Var(mibValue{&c.MaxMemoryMiB}, "max-memory", "the most memory the guest may grow to live, in MiB or as a quantity such as 4Gi (default: --memory-mib, no memory hotplug)")
	fs.StringVar(&c.ControlSocket, "control-socket", DefaultControlSocket, "unix socket of the runner's control API (live resize), for the node agent; empty: none")
}

func (c *Config) validateResize() []error {
	var errs []error
	if c.MaxCPUs != 0 && c.MaxCPUs < c.CPUs {
		errs = append(errs, fmt.Errorf("--max-cpus: %d is below --cpus %d; give at least --cpus, or leave it out", c.MaxCPUs, c.CPUs))
	}
	if c.MaxMemoryMiB != 0 && c.MaxMemoryMiB < c.MemoryMiB {
		errs = append(errs, fmt.Errorf("--max-memory: %d MiB is below --memory-mib %d; give at least --memory-mib, or leave it out", c.MaxMemoryMiB, c.MemoryMiB))
	}
	if block := vmv1.MemoryHotplugBlock >> 20; c.MaxMemoryMiB > c.MemoryMiB && (c.MemoryMiB%block != 0 || c.MaxMemoryMiB%block != 0) {
		errs = append(errs, fmt.Errorf("--memory-mib, --max-memory: with room to grow both must be multiples of %d MiB (the memory hotplug block), got %d and %d", block, c.MemoryMiB, c.MaxMemoryMiB))
	}
	return errs
}

// mibValue is a size in MiB given as a number of MiB or as a quantity (4Gi).
type mibValue struct{ p *int64 }

func (v mibValue) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.FormatInt(*v.p, 10)
}

func (v mibValue) Set(s string) error {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		*v.p = n
		return nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("%q is neither a number of MiB nor a quantity such as 4Gi", s)
	}
	*v.p = (q.Value() + 1<<20 - 1) >> 20
	return nil
}
