package qemu

import (
	"context"

	qemuargs "github.com/virtpod/virtpod/pkg/qemu"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// Screendump has QEMU write what the guest's VGA card shows to path, as PPM: the format every
// QEMU writes (7.2 and 10.0 alike; PNG is a later, optional build feature). QEMU answers once
// the file is written.
func (q *VM) Screendump(_ context.Context, path string) error {
	if q.spec.VNCSocket == "" {
		return hypervisor.ErrNoDisplay
	}
	return q.qmpRun("screendump", map[string]any{"filename": path, "device": qemuargs.VideoID}, nil)
}

var _ hypervisor.Screen = (*VM)(nil)
