package qemu

import (
	"context"

	qemuargs "github.com/virtpod/virtpod/pkg/qemu"
)

// AgentChannelOpen says whether the guest has its agent's port open, which is whether an agent
// listens there: QEMU's query-chardev reports the guest's side of the virtio-serial port as
// frontend-open. Asking costs nothing in the guest, unlike a command no agent would answer.
func (q *VM) AgentChannelOpen(context.Context) (bool, error) {
	if q.spec.AgentSocket == "" {
		return false, nil
	}
	var devs []struct {
		Label        string `json:"label"`
		FrontendOpen bool   `json:"frontend-open"`
	}
	if err := q.qmpRun("query-chardev", nil, &devs); err != nil {
		return false, err
	}
	for _, d := range devs {
		if d.Label == qemuargs.AgentChardev {
			return d.FrontendOpen, nil
		}
	}
	return false, nil
}
