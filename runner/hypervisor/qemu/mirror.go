package qemu

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/runner/hypervisor"
)

// Disks travel by NBD mirroring, libvirt's sequence for storage that is not shared, and the
// same on every QEMU since 5.2 (block migration, which 7.2 still has, is gone from 9.1):
//   - the target serves its writable disks over NBD (ExportDisks) while it waits for the guest;
//   - the source opens an NBD client node per disk and mirrors the disk onto it (blockdev-mirror:
//     the top overlay only over a base both sides have, or the whole disk) until every mirror is
//     ready, writes being copied as they happen from then on;
//   - then it sends memory, with pause-before-switchover: at pre-switchover its guest is paused,
//     the mirrors are completed (block-job-cancel of a ready mirror syncs it and leaves the
//     guest on its own disk), and only then does the switch go on;
//   - the target stops its exports before its guest runs (StopExports).
// A mirror that fails fails the migration, and the guest goes on at the source.

// mirrorPoll is how often a send looks at its mirror jobs and QEMU's migration while it drives
// them (only during a migration); switchPoll while the guest is paused at the switch.
const (
	mirrorPoll = 20 * time.Millisecond
	switchPoll = 2 * time.Millisecond
)

// send is one migration from this QEMU: its mirrors and where it stands.
type send struct {
	disks  []hypervisor.MirrorDisk
	capped bool          // the request named its bandwidth: a paused copy keeps to it too
	events chan string   // QEMU's MIGRATION statuses
	stop   chan struct{} // closed by CancelMigration
	done   chan struct{} // closed when the send and its mirrors are over
	once   sync.Once

	mu        sync.Mutex
	mirroring bool   // the mirrors are not yet ready: memory is not being sent
	pausedAll bool   // the guest was paused for the whole memory copy (TCG): all of it is downtime
	failure   string // why the send failed outside QEMU's migration
	cancelled bool
	progress  []hypervisor.MirrorProgress
}

// nodeName is the mirror's NBD client node and its job's id for drive.
func nodeName(drive string) string { return "mig-" + drive }

func (s *send) fail(err error) {
	s.mu.Lock()
	if s.failure == "" {
		s.failure = err.Error()
	}
	s.mu.Unlock()
}

// endMirroring marks the mirror phase over: memory is sent from now on, or the send ended in it.
func (s *send) endMirroring() {
	s.mu.Lock()
	s.mirroring = false
	s.mu.Unlock()
}

// cancel asks the send to stop, once.
func (s *send) cancel() {
	s.once.Do(func() {
		s.mu.Lock()
		s.cancelled = true
		s.mu.Unlock()
		close(s.stop)
	})
}

// report adds the mirrors to QEMU's view of the migration.
func (s *send) report(m *hypervisor.MigrationInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m.Mirrors = append([]hypervisor.MirrorProgress(nil), s.progress...)
	switch {
	case s.failure != "":
		m.Status = "failed"
		m.ErrorDesc = strings.TrimSuffix(s.failure+"; "+m.ErrorDesc, "; ")
	case s.mirroring:
		m.Status = "active" // still copying the disks, or stopping that copy
	case s.cancelled && (m.Status == "" || m.Status == "none" || m.Status == "completed"):
		// Cancelled while the disks were copied, before memory was sent: QEMU's status is
		// still the last migration's.
		m.Status = "cancelled"
	}
	if s.pausedAll && m.TotalTime > m.Downtime {
		// QEMU counts its downtime from its own stop at the switch; the guest stopped when the
		// copy began, which QEMU's total time starts from.
		m.Downtime = m.TotalTime
	}
}

// startMirrors connects an NBD client node per disk and starts mirroring onto it. Every disk
// gets the same share of the bandwidth the memory stream gets.
func (q *VM) startMirrors(s *send, nbdSock string, bandwidth int64) error {
	if len(s.disks) == 0 {
		return nil
	}
	speed := bandwidth / int64(len(s.disks))
	for _, d := range s.disks {
		node := nodeName(d.Drive)
		if err := q.qmpRun("blockdev-add", map[string]any{
			"driver": "nbd", "node-name": node, "export": d.Drive,
			"server": map[string]any{"type": "unix", "path": nbdSock},
		}, nil); err != nil {
			return fmt.Errorf("connecting disk %s to the target's NBD export through %s: %w", d.Drive, nbdSock, err)
		}
		sync := "top"
		if d.Whole {
			sync = "full"
		}
		if err := q.qmpRun("blockdev-mirror", map[string]any{
			"job-id": node, "device": d.Drive, "target": node, "sync": sync,
			"speed": speed, "auto-dismiss": false,
		}, nil); err != nil {
			return fmt.Errorf("mirroring disk %s: %w", d.Drive, err)
		}
		s.mu.Lock()
		s.progress = append(s.progress, hypervisor.MirrorProgress{Drive: d.Drive})
		s.mu.Unlock()
		q.log.Info("mirroring a disk to the target", zap.String("drive", d.Drive), zap.String("sync", sync))
	}
	return nil
}

// blockJob is what query-block-jobs says of a job.
type blockJob struct {
	Device string `json:"device"`
	Len    int64  `json:"len"`
	Offset int64  `json:"offset"`
	Ready  bool   `json:"ready"`
	Status string `json:"status"`
	Error  string `json:"error"`
}

// mirrorJobs reads the send's jobs and records their progress. ready: every one is ready;
// a job that ended with an error, or is gone, is the error.
func (q *VM) mirrorJobs(s *send) (ready bool, jobs map[string]blockJob, err error) {
	var all []blockJob
	if err := q.qmpRun("query-block-jobs", nil, &all); err != nil {
		return false, nil, err
	}
	jobs = map[string]blockJob{}
	for _, j := range all {
		jobs[j.Device] = j
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ready = true
	for i, d := range s.disks {
		j, ok := jobs[nodeName(d.Drive)]
		if !ok {
			return false, jobs, fmt.Errorf("the mirror of disk %s is gone", d.Drive)
		}
		if i < len(s.progress) {
			s.progress[i].Transferred, s.progress[i].Total = j.Offset, j.Len
		}
		if j.Error != "" {
			return false, jobs, fmt.Errorf("the mirror of disk %s failed: %s", d.Drive, j.Error)
		}
		ready = ready && j.Ready
	}
	return ready, jobs, nil
}

// drive runs a send with mirrors: it waits for them to be ready, sends memory, completes them
// at the switch, and cleans them up however the migration ends.
func (q *VM) drive(s *send, uri string) {
	defer close(s.done)
	tick := time.NewTicker(mirrorPoll)
	defer tick.Stop()
	if !q.awaitMirrors(s, tick) {
		return
	}
	resume, ok := q.startMemory(s, uri)
	if !ok {
		return
	}
	q.followSend(s, tick, resume)
}

// awaitMirrors waits until every disk's mirror is in sync; false when the send ended first.
func (q *VM) awaitMirrors(s *send, tick *time.Ticker) bool {
	for {
		ready, _, err := q.mirrorJobs(s)
		if err != nil {
			s.fail(err)
			q.abortMirrors(s)
			s.endMirroring()
			return false
		}
		if ready {
			q.log.Info("every mirror is ready: sending memory")
			s.endMirroring()
			return true
		}
		select {
		case <-s.stop:
			q.abortMirrors(s)
			s.endMirroring()
			return false
		case <-q.exited:
			return false
		case <-tick.C:
		}
	}
}

// startMemory starts the memory stream to uri. Under TCG the memory is copied with the guest
// paused (stop and copy): QEMU 7.2's TCG dirty tracking has lost pages the guest wrote during a
// live copy when the host's CPUs were starved, and the guest crashed at the target
// (docs/runner.md, Known problems). KVM guests' dirty pages are the kernel's to track: they
// migrate live. resume lets a guest paused here run again should the send end without moving it.
func (q *VM) startMemory(s *send, uri string) (resume func(), ok bool) {
	paused := false
	resume = func() {
		if paused {
			if err := q.qmpRun("cont", nil, nil); err != nil {
				q.log.Error("resuming the guest after its migration ended without moving it", zap.Error(err))
			}
		}
	}
	if q.spec.Acceleration == "tcg" {
		if err := q.qmpRun("stop", nil, nil); err != nil {
			s.fail(fmt.Errorf("pausing the emulated guest for its memory copy: %w", err))
			q.abortMirrors(s)
			return nil, false
		}
		paused = true
		s.mu.Lock()
		s.pausedAll = true
		s.mu.Unlock()
	}
	// Paused, every millisecond of the copy is downtime: unless the migration named its
	// bandwidth, the copy runs as fast as the stream takes it, not at the live copy's default.
	if paused && !s.capped {
		if err := q.qmpRun("migrate-set-parameters", map[string]any{"max-bandwidth": pausedBandwidth}, nil); err != nil {
			s.fail(fmt.Errorf("lifting the bandwidth bound for the paused copy: %w", err))
			q.abortMirrors(s)
			resume()
			return nil, false
		}
	}
	if err := q.qmpRun("migrate", map[string]any{"uri": uri}, nil); err != nil {
		s.fail(fmt.Errorf("starting the memory stream: %w", err))
		q.abortMirrors(s)
		resume()
		return nil, false
	}
	return resume, true
}

// followSend follows the memory stream to its end: at the switch it completes the mirrors
// (the guest paused) and lets QEMU switch over; a send that failed or was cancelled leaves the
// guest running here.
func (q *VM) followSend(s *send, tick *time.Ticker, resume func()) {
	switched := false // the switch is handled once: its event and a poll may both report it
	for {
		var status string
		select {
		case status = <-s.events:
		case <-tick.C:
			var m hypervisor.MigrationInfo
			if err := q.qmpRun("query-migrate", nil, &m); err != nil {
				if errors.Is(err, hypervisor.ErrNotRunning) {
					return
				}
				continue
			}
			status = m.Status
			_, _, _ = q.mirrorJobs(s) // progress only: a mirror's end shows at the switch
		case <-q.exited:
			return
		}
		switch status {
		case "pre-switchover":
			if switched {
				continue
			}
			switched = true
			q.switchOver(s)
		case "completed":
			q.dropNBDNodes(s)
			return
		case "failed", "cancelled":
			q.abortMirrors(s)
			resume()
			return
		}
	}
}

// switchOver completes the mirrors and lets QEMU switch the guest to the target; on failure
// the migration is cancelled and the guest resumes here.
func (q *VM) switchOver(s *send) {
	if err := q.completeMirrors(s); err != nil {
		s.fail(err)
		_ = q.qmpRun("migrate_cancel", nil, nil) // the guest resumes here
		return
	}
	if err := q.qmpRun("migrate-continue", map[string]any{"state": "pre-switchover"}, nil); err != nil {
		s.fail(fmt.Errorf("switching over: %w", err))
		_ = q.qmpRun("migrate_cancel", nil, nil)
	}
}

// completeMirrors ends every ready mirror in sync, the guest being paused: block-job-cancel of a
// ready mirror completes it and leaves the guest on its own disk.
func (q *VM) completeMirrors(s *send) error {
	start := time.Now()
	for _, d := range s.disks {
		if err := q.qmpRun("block-job-cancel", map[string]any{"device": nodeName(d.Drive)}, nil); err != nil {
			return fmt.Errorf("completing the mirror of disk %s: %w", d.Drive, err)
		}
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(switchPoll) {
		_, jobs, err := q.mirrorJobs(s)
		if err != nil {
			return err
		}
		concluded := 0
		for _, d := range s.disks {
			if jobs[nodeName(d.Drive)].Status == "concluded" {
				concluded++
			}
		}
		if concluded == len(s.disks) {
			break
		}
		if time.Now().After(end) {
			return fmt.Errorf("the mirrors did not complete within 30s of the switch")
		}
	}
	q.dismissJobs(s)
	q.log.Info("mirrors completed at the switch", zap.Duration("took", time.Since(start)))
	return nil
}

// abortMirrors stops every mirror at once and disconnects from the target: the guest keeps
// running here on its own disks.
func (q *VM) abortMirrors(s *send) {
	for _, d := range s.disks {
		_ = q.qmpRun("block-job-cancel", map[string]any{"device": nodeName(d.Drive), "force": true}, nil)
	}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(mirrorPoll) {
		var all []blockJob
		if err := q.qmpRun("query-block-jobs", nil, &all); err != nil {
			break
		}
		running := 0
		for _, j := range all {
			if strings.HasPrefix(j.Device, "mig-") && j.Status != "concluded" {
				running++
			}
		}
		if running == 0 {
			break
		}
	}
	q.dismissJobs(s)
	q.dropNBDNodes(s)
	q.log.Info("mirrors stopped; the guest stays on its own disks")
}

func (q *VM) dismissJobs(s *send) {
	for _, d := range s.disks {
		_ = q.qmpRun("job-dismiss", map[string]any{"id": nodeName(d.Drive)}, nil)
	}
}

// dropNBDNodes closes the NBD connections to the target.
func (q *VM) dropNBDNodes(s *send) {
	for _, d := range s.disks {
		if err := q.qmpRun("blockdev-del", map[string]any{"node-name": nodeName(d.Drive)}, nil); err != nil {
			q.log.Debug("blockdev-del", zap.String("drive", d.Drive), zap.Error(err))
		}
	}
}

// ExportDisks serves drives over NBD on the unix socket sock, writable, for the source's
// mirrors. The export makes the drive's image active (writable) before the guest arrives; QEMU
// does that for block exports, as non-shared storage migration needs.
func (q *VM) ExportDisks(sock string, drives []string) error {
	if len(drives) == 0 {
		return nil
	}
	if err := q.qmpRun("nbd-server-start", map[string]any{"addr": map[string]any{"type": "unix", "data": map[string]any{"path": sock}}}, nil); err != nil {
		return fmt.Errorf("starting the NBD server for the incoming disks: %w", err)
	}
	nodes, err := q.driveNodes()
	if err != nil {
		return err
	}
	for _, d := range drives {
		node, ok := nodes[d]
		if !ok {
			return fmt.Errorf("exporting disk %s: no such drive", d)
		}
		if err := q.qmpRun("block-export-add", map[string]any{"type": "nbd", "id": nodeName(d), "node-name": node, "name": d, "writable": true}, nil); err != nil {
			return fmt.Errorf("exporting disk %s: %w", d, err)
		}
	}
	q.exports = drives
	q.log.Info("serving the incoming disks over NBD", zap.String("socket", sock), zap.Strings("drives", drives))
	return nil
}

// driveNodes maps each drive id to its top block node.
func (q *VM) driveNodes() (map[string]string, error) {
	var blocks []struct {
		Device   string `json:"device"`
		Qdev     string `json:"qdev"`
		Inserted *struct {
			NodeName string `json:"node-name"`
		} `json:"inserted"`
	}
	if err := q.qmpRun("query-block", nil, &blocks); err != nil {
		return nil, err
	}
	nodes := map[string]string{}
	for _, b := range blocks {
		if b.Inserted != nil {
			nodes[driveOf(b.Device, b.Qdev)] = b.Inserted.NodeName
		}
	}
	return nodes, nil
}

// StopExports ends the NBD exports (disconnecting the source, whose mirrors completed before
// the switch) and the server: the arrived guest owns its disks from now on.
func (q *VM) StopExports() error {
	if len(q.exports) == 0 {
		return nil
	}
	var errs []error
	for _, d := range q.exports {
		if err := q.qmpRun("block-export-del", map[string]any{"id": nodeName(d), "mode": "hard"}, nil); err != nil {
			errs = append(errs, err)
		}
	}
	if err := q.qmpRun("nbd-server-stop", nil, nil); err != nil {
		errs = append(errs, err)
	}
	q.exports = nil
	return errors.Join(errs...)
}
