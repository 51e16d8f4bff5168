package qemu

import (
	"encoding/json"
	"fmt"

	"github.com/virtpod/virtpod/runner/hypervisor"
)

// qmpRun runs one QMP command and decodes its return value into out. It is how resize and
// migration talk to QEMU: go-qemu's raw monitor lacks the commands they need. Before QMP is up
// and after QEMU exited it answers ErrNotRunning, which the control API reports as such.
func (q *VM) qmpRun(cmd string, args, out any) error {
	mon := q.ctl.Load()
	if mon == nil {
		return hypervisor.ErrNotRunning
	}
	select {
	case <-q.exited:
		return hypervisor.ErrNotRunning
	default:
	}
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, _ := json.Marshal(req)
	res, err := mon.Run(b)
	if err != nil {
		return fmt.Errorf("QMP %s: %w", cmd, err)
	}
	if out == nil {
		return nil
	}
	var r struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return fmt.Errorf("QMP %s: %w", cmd, err)
	}
	return json.Unmarshal(r.Return, out)
}
