package qemu

import "fmt"

// saveBandwidth is the rate a suspend writes the guest's state at: as fast as the disk takes
// it (QEMU's default limit, 128 MiB/s, is for a live copy over a network).
const saveBandwidth = 4 << 30

// pausedBandwidth bounds an emulated guest's paused migration copy when the migration named no
// bandwidth: the guest runs again only once the copy is over, so the copy goes as fast as the
// stream takes it. 128 GiB/s is no bound in practice; QEMU 10.0 still held a paused copy back
// at 4 GiB/s (331 ms against 160 ms for the same 256 MiB guest, docs/benchmarks.md).
const pausedBandwidth = 128 << 30

// SaveGuest pauses the guest and streams its state (memory and devices) to the unix socket at
// sock, where the runner writes it to a file; it returns once QEMU took the request, and
// QueryMigrate follows it. Paused first, the state is one pass and nothing changes after it:
// the guest never runs again in this QEMU unless a failed save resumes it (ResumeGuest).
func (q *VM) SaveGuest(sock string) error {
	if err := q.qmpRun("stop", nil, nil); err != nil {
		return fmt.Errorf("pause the guest: %w", err)
	}
	caps := []map[string]any{
		{"capability": "events", "state": true},
		{"capability": "auto-converge", "state": false},
		{"capability": "pause-before-switchover", "state": false},
	}
	if err := q.qmpRun("migrate-set-capabilities", map[string]any{"capabilities": caps}, nil); err != nil {
		return err
	}
	if err := q.qmpRun("migrate-set-parameters", map[string]any{"max-bandwidth": saveBandwidth}, nil); err != nil {
		return err
	}
	return q.qmpRun("migrate", map[string]any{"uri": "unix:" + sock}, nil)
}
