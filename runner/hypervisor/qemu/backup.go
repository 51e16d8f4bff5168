package qemu

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// A backup is QEMU's push backup (QEMU docs/interop/bitmaps.rst), the same on QEMU 7.2 and 10.0:
//   - an NBD client node per drive, connected to the target the caller serves;
//   - one QMP transaction that, for every drive at once, starts a new dirty bitmap and a
//     blockdev-backup job onto the target: sync=full, or sync=bitmap over the previous backup's
//     bitmap with bitmap-mode=never, so a failure leaves that bitmap as it was. The transaction
//     is the backup's instant: each job copies the drive as it was then (copy-before-write
//     keeps what the guest overwrites until it is copied), while the guest runs on;
//   - once every job concluded, the targets are closed (flushed, disconnected) and the previous
//     bitmaps removed: the new one tracks the changes since this instant. A failure cancels the
//     jobs and removes the new bitmaps, so the next backup can still start from the old ones.
// The bitmaps are not persistent: a QEMU that restarts or a guest that migrates has none, and
// its next backup is a full one.

// backupPoll is how often a backup looks at its jobs (at most); backupCancelWait bounds how long a failed
// one waits for its jobs to end.
const (
	backupPoll       = 100 * time.Millisecond
	backupCancelWait = 10 * time.Second
)

// backupDrive is one drive of a backup as QEMU knows it.
type backupDrive struct {
	controlapi.BackupDrive
	node   string // the drive's top node: the copy's source, where the bitmaps live
	target string // the NBD client node the copy goes to
	sock   string // the target's socket
	job    string
	size   int64
}

// blockInfo is query-block's entry for a drive (with its top node's bitmaps), and
// query-named-block-nodes' for a node.
type blockInfo struct {
	Device   string          `json:"device"`
	Qdev     string          `json:"qdev"`
	Inserted *blockNode      `json:"inserted"`
	NodeName string          `json:"node-name"`
	Image    blockNodeImage  `json:"image"`
	Bitmaps  []blockNodeName `json:"dirty-bitmaps"`
}

type blockNode struct {
	NodeName string          `json:"node-name"`
	RO       bool            `json:"ro"`
	Image    blockNodeImage  `json:"image"`
	Bitmaps  []blockNodeName `json:"dirty-bitmaps"`
}

type blockNodeImage struct {
	VirtualSize int64 `json:"virtual-size"`
}

type blockNodeName struct {
	Name string `json:"name"`
}

// jobInfo is query-jobs' entry for a job: a backup's progress is the bytes it went through.
type jobInfo struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Current int64  `json:"current-progress"`
	Total   int64  `json:"total-progress"`
	Error   string `json:"error"`
}

func refusal(format string, args ...any) error {
	return &hypervisor.BackupRefusal{Reason: fmt.Sprintf(format, args...)}
}

// Backup copies req's drives onto their NBD targets in controlDir as they were at one instant
// (hypervisor.Backuper).
func (q *VM) Backup(ctx context.Context, controlDir string, req controlapi.BackupRequest, quiesce func() (thaw func())) (controlapi.BackupStatus, error) {
	st := controlapi.BackupStatus{Bitmap: req.Bitmap}
	if err := q.backupBlocked(); err != nil {
		return st, err
	}
	drives, err := q.backupDrives(controlDir, req)
	if err != nil {
		return st, err
	}
	if err := q.connectTargets(drives); err != nil {
		q.dropTargets(drives)
		return st, err
	}
	thaw := func() {}
	if quiesce != nil {
		thaw = quiesce()
	}
	err = q.qmpRun("transaction", map[string]any{"actions": backupActions(req.Bitmap, drives)}, nil)
	thaw()
	if err != nil {
		q.dropTargets(drives)
		return st, fmt.Errorf("starting the backup: %w", err)
	}
	jobs, err := q.awaitBackup(ctx, drives)
	if err == nil {
		err = q.closeTargets(drives)
	}
	st.Drives = driveStatus(drives, jobs)
	if errors.Is(err, hypervisor.ErrNotRunning) {
		err = errors.New("the guest's QEMU ended during the backup") // a failure, not a refusal
	}
	if err != nil {
		q.abortBackup(req.Bitmap, drives)
		return st, err
	}
	for _, d := range drives {
		if d.Since == "" {
			continue
		}
		if err := q.qmpRun("block-dirty-bitmap-remove", map[string]any{"node": d.node, "name": d.Since}, nil); err != nil {
			q.log.Warn("removing the previous backup's bitmap", zap.String("drive", d.Drive), zap.String("bitmap", d.Since), zap.Error(err))
		}
	}
	return st, nil
}

// driveStatus is each drive's copy as its job went (nothing yet when the job is not known).
func driveStatus(drives []backupDrive, jobs map[string]jobInfo) []controlapi.BackupDriveStatus {
	out := make([]controlapi.BackupDriveStatus, 0, len(drives))
	for _, d := range drives {
		out = append(out, controlapi.BackupDriveStatus{Drive: d.Drive, Size: d.size, Copied: jobs[d.job].Current, Incremental: d.Since != ""})
	}
	return out
}

// backupBlocked refuses a backup while a migration from here runs or cleans up its mirrors.
func (q *VM) backupBlocked() error {
	if q.sending() {
		return refusal("a migration of the guest is under way: back up once it ended")
	}
	return nil
}

// sending says whether a migration from here runs or cleans up its mirrors.
func (q *VM) sending() bool {
	s := q.current()
	if s == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// backupDrives checks req's drives against QEMU's: each is the guest's, writable, has the
// bitmap it names in Since and not yet the new one.
func (q *VM) backupDrives(controlDir string, req controlapi.BackupRequest) ([]backupDrive, error) {
	var blocks []blockInfo
	if err := q.qmpRun("query-block", nil, &blocks); err != nil {
		return nil, err
	}
	guest := q.drives()
	var drives []backupDrive
	for i, d := range req.Drives {
		j := slices.IndexFunc(blocks, func(b blockInfo) bool { return driveOf(b.Device, b.Qdev) == d.Drive })
		if !slices.Contains(guest, d.Drive) || j < 0 || blocks[j].Inserted == nil {
			return nil, refusal("drive %s: the guest has no such drive; its drives are %s", d.Drive, strings.Join(guest, ", "))
		}
		b := blocks[j].Inserted
		names := make([]string, 0, len(b.Bitmaps))
		for _, m := range b.Bitmaps {
			names = append(names, m.Name)
		}
		switch {
		case b.RO:
			return nil, refusal("drive %s is read-only: the guest cannot write it, so there is nothing to back up; leave it out", d.Drive)
		case slices.Contains(names, req.Bitmap):
			return nil, refusal("drive %s already has a bitmap %s, from an earlier backup: name this backup's bitmap anew", d.Drive, req.Bitmap)
		case d.Since != "" && !slices.Contains(names, d.Since):
			return nil, refusal("drive %s has no bitmap %s: the guest's QEMU restarted or migrated since that backup; take a full one", d.Drive, d.Since)
		}
		drives = append(drives, backupDrive{BackupDrive: d, node: b.NodeName, size: b.Image.VirtualSize,
			target: fmt.Sprintf("backup-target-%d", i), sock: filepath.Join(controlDir, d.Socket), job: "backup-" + d.Drive})
	}
	return drives, nil
}

// Drives are the guest's drives (root, cidata, disk-<name>) with their sizes, from query-block.
func (q *VM) Drives(context.Context) ([]controlapi.Drive, error) {
	var blocks []blockInfo
	if err := q.qmpRun("query-block", nil, &blocks); err != nil {
		return nil, err
	}
	var out []controlapi.Drive
	for _, d := range q.drives() {
		j := slices.IndexFunc(blocks, func(b blockInfo) bool { return driveOf(b.Device, b.Qdev) == d })
		if j < 0 || blocks[j].Inserted == nil {
			continue
		}
		b := blocks[j].Inserted
		out = append(out, controlapi.Drive{Drive: d, SizeBytes: b.Image.VirtualSize, ReadOnly: b.RO})
	}
	return out, nil
}

// connectTargets opens an NBD client node per drive onto its target and checks the target is
// the drive's size.
func (q *VM) connectTargets(drives []backupDrive) error {
	for _, d := range drives {
		if err := q.qmpRun("blockdev-add", map[string]any{
			"driver": "nbd", "node-name": d.target, "export": d.Drive,
			"server": map[string]any{"type": "unix", "path": d.sock},
		}, nil); err != nil {
			if errors.Is(err, hypervisor.ErrNotRunning) {
				return err
			}
			return refusal("drive %s: no NBD export %s on %s (%v): serve the drive's target there under the drive's name", d.Drive, d.Drive, d.Socket, err)
		}
	}
	var nodes []blockInfo
	if err := q.qmpRun("query-named-block-nodes", map[string]any{"flat": true}, &nodes); err != nil {
		return err
	}
	for _, d := range drives {
		i := slices.IndexFunc(nodes, func(n blockInfo) bool { return n.NodeName == d.target })
		if i >= 0 && nodes[i].Image.VirtualSize != d.size {
			return refusal("drive %s: its target on %s has %d bytes, the drive %d: serve a target of the drive's size", d.Drive, d.Socket, nodes[i].Image.VirtualSize, d.size)
		}
	}
	return nil
}

// backupActions are the transaction that is the backup's instant: per drive, the new bitmap
// and the job.
func backupActions(bitmap string, drives []backupDrive) []map[string]any {
	var acts []map[string]any
	for _, d := range drives {
		acts = append(acts, map[string]any{"type": "block-dirty-bitmap-add", "data": map[string]any{"node": d.node, "name": bitmap, "persistent": false}})
		job := map[string]any{"job-id": d.job, "device": d.node, "target": d.target, "sync": "full", "auto-finalize": true, "auto-dismiss": false}
		if d.Since != "" {
			job["sync"], job["bitmap"], job["bitmap-mode"] = "bitmap", d.Since, "never"
		}
		acts = append(acts, map[string]any{"type": "blockdev-backup", "data": job})
	}
	return acts
}

// backupJobs are QEMU's jobs by id.
func (q *VM) backupJobs() (map[string]jobInfo, error) {
	var all []jobInfo
	if err := q.qmpRun("query-jobs", nil, &all); err != nil {
		return nil, err
	}
	jobs := make(map[string]jobInfo, len(all))
	for _, j := range all {
		jobs[j.ID] = j
	}
	return jobs, nil
}

// awaitBackup waits until every drive's job concluded; a job that failed is the error, and so
// is ctx's end.
func (q *VM) awaitBackup(ctx context.Context, drives []backupDrive) (map[string]jobInfo, error) {
	// A small or incremental copy ends in milliseconds: look soon, then every backupPoll.
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, backupPoll) {
		jobs, err := q.backupJobs()
		if err != nil {
			return nil, err
		}
		done := 0
		for _, d := range drives {
			j, ok := jobs[d.job]
			switch {
			case !ok:
				return jobs, fmt.Errorf("the backup job of drive %s is gone", d.Drive)
			case j.Status == "concluded" && j.Error != "":
				return jobs, fmt.Errorf("the backup of drive %s failed: %s", d.Drive, j.Error)
			case j.Status == "concluded":
				done++
			}
		}
		if done == len(drives) {
			return jobs, nil
		}
		select {
		case <-ctx.Done():
			return jobs, fmt.Errorf("the backup did not complete: %w", ctx.Err())
		case <-q.exited:
			return jobs, hypervisor.ErrNotRunning
		case <-time.After(wait):
		}
	}
}

// closeTargets dismisses the concluded jobs and closes the NBD nodes, which flushes the
// targets and disconnects from them.
func (q *VM) closeTargets(drives []backupDrive) error {
	for _, d := range drives {
		if err := q.qmpRun("job-dismiss", map[string]any{"id": d.job}, nil); err != nil {
			return fmt.Errorf("the backup of drive %s: %w", d.Drive, err)
		}
	}
	for _, d := range drives {
		if err := q.qmpRun("blockdev-del", map[string]any{"node-name": d.target}, nil); err != nil {
			return fmt.Errorf("flushing and closing the target of drive %s: %w", d.Drive, err)
		}
	}
	return nil
}

// dropTargets closes whatever NBD nodes of drives are open.
func (q *VM) dropTargets(drives []backupDrive) {
	for _, d := range drives {
		_ = q.qmpRun("blockdev-del", map[string]any{"node-name": d.target}, nil)
	}
}

// abortBackup cancels the jobs still running, closes the targets and removes the new bitmaps:
// the drives keep the bitmaps they had, so the next backup can still be incremental.
func (q *VM) abortBackup(bitmap string, drives []backupDrive) {
	for _, d := range drives {
		_ = q.qmpRun("block-job-cancel", map[string]any{"device": d.job, "force": true}, nil)
	}
	for end := time.Now().Add(backupCancelWait); time.Now().Before(end); time.Sleep(backupPoll) {
		jobs, err := q.backupJobs()
		if err != nil {
			break
		}
		running := slices.ContainsFunc(drives, func(d backupDrive) bool {
			j, ok := jobs[d.job]
			return ok && j.Status != "concluded"
		})
		if !running {
			break
		}
	}
	for _, d := range drives {
		_ = q.qmpRun("job-dismiss", map[string]any{"id": d.job}, nil)
	}
	q.dropTargets(drives)
	for _, d := range drives {
		if err := q.qmpRun("block-dirty-bitmap-remove", map[string]any{"node": d.node, "name": bitmap}, nil); err != nil {
			q.log.Warn("removing a failed backup's bitmap", zap.String("drive", d.Drive), zap.String("bitmap", bitmap), zap.Error(err))
		}
	}
	q.log.Info("backup stopped; the drives keep their earlier bitmaps", zap.String("bitmap", bitmap))
}

var _ hypervisor.Backuper = (*VM)(nil)
