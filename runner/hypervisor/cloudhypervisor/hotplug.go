package cloudhypervisor

import (
	"context"
	"fmt"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// errNoHotplug: disk hotplug is the QEMU driver's (runnerconfig refuses --hotplug-slots here).
var errNoHotplug = fmt.Errorf("%w: disk hotplug: provider cloud-hypervisor cannot attach or detach disks of a running guest; only provider qemu can", hypervisor.ErrUnsupported)

// Hotplug refuses: this driver has no hotplug slots.
func (c *VM) Hotplug(context.Context, string, controlapi.HotplugRequest) (controlapi.HotplugStatus, error) {
	return controlapi.HotplugStatus{Error: errNoHotplug.Error()}, errNoHotplug
}

// Hotplugged refuses likewise.
func (c *VM) Hotplugged(context.Context) (controlapi.HotplugStatus, error) {
	return controlapi.HotplugStatus{Error: errNoHotplug.Error()}, errNoHotplug
}
