// Package snapshot is the node agent's part of a VirtualMachineSnapshot of a running guest
// (docs/snapshots.md): for a runner pod the controller marked (vm.virtpod.io/snapshot), it tells
// the snapshot's copier pod on the same node how large each target is, relays the runner's
// QEMU's NBD connections from the runner's control directory into the copier's, asks the runner
// to push its drives (PUT /v1/backup) and writes the answer into the runner pod
// (vm.virtpod.io/snapshot-result), which is what the controller records. It acts only when the
// VM names the pod, the snapshot (whose status only the controller writes) names the pod and
// its copier, and the copier is the snapshot's own pod on this node.
package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/virtpod/virtpod/agent/podcontrol"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
)

// Executor carries out the snapshots of the running guests on one node.
type Executor struct {
	podcontrol.Agent
	// Timeout bounds one copy (default 30 minutes); Ready how long the copier may take to
	// serve its targets once told their sizes (default 2 minutes).
	Timeout time.Duration
	Ready   time.Duration

	mu     sync.Mutex
	active map[types.UID]string // runner pods whose copy this agent carries out now
	// answered are the runner pods this agent wrote a result on, by the snapshot: the watch may
	// still show a pod without it, and a copy is never made twice (its copier serves once).
	answered map[types.UID]string
}

// TargetsFile is what the agent writes in the copier's control directory: each drive's size in
// bytes, by drive id. virtpod-runner disk-target waits for it, then serves its targets.
const TargetsFile = "targets.json"

// workers is how many of a node's guests copy at once: each reads its disks whole at worst.
const workers = 2

// Run follows the node's runner pods until ctx ends.
func (e *Executor) Run(ctx context.Context) error {
	if e.Timeout <= 0 {
		e.Timeout = 30 * time.Minute
	}
	if e.Ready <= 0 {
		e.Ready = 2 * time.Minute
	}
	return e.Serve(ctx, podcontrol.Loop{Name: "snapshot", Workers: workers, MaxDelay: 5 * time.Minute, Retrying: "snapshot not done; retrying"},
		func(*podcontrol.NodePods) podcontrol.Handler {
			return podcontrol.GoneIsDone(func(ctx context.Context, pod *corev1.Pod) (time.Duration, error) {
				return 0, e.handle(ctx, pod)
			})
		})
}

// handle copies for one marked pod, once: a pod that has the snapshot's result is done.
func (e *Executor) handle(ctx context.Context, pod *corev1.Pod) error {
	name := pod.Annotations[vmv1.AnnotationSnapshot]
	if name == "" {
		e.forget(pod.UID) // the controller took its mark off: the copy is over
	}
	if name == "" || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || answered(pod, name) || !e.begin(pod.UID, name) {
		return nil
	}
	done := false
	defer func() { e.end(pod.UID, name, done) }()
	snap, copier, err := e.authorize(ctx, pod, name)
	if err != nil || snap == nil {
		return err
	}
	log := e.Log.With(zap.String("pod", pod.Namespace+"/"+pod.Name), zap.String("snapshot", name))
	log.Info("copying the guest's disks for a snapshot", zap.String("copier", copier.Name))
	st, err := e.copy(ctx, pod, snap, copier, log)
	if err != nil {
		st.Error = err.Error()
		log.Warn("snapshot copy failed", zap.Error(err))
	} else {
		log.Info("snapshot copied", zap.Any("drives", st.Drives), zap.String("consistency", st.Consistency))
	}
	err = e.answer(ctx, pod, controlapi.SnapshotResult{Snapshot: name, Status: st})
	done = err == nil
	return err
}

// authorize is the snapshot and its copier, when the controller's objects vouch for both; nil
// when the snapshot does not ask for this pod (any more): nothing to do.
func (e *Executor) authorize(ctx context.Context, pod *corev1.Pod, name string) (*vmv1.VirtualMachineSnapshot, *corev1.Pod, error) {
	owner, err := podcontrol.Authorize(ctx, e.Kube, pod)
	if err != nil || owner.Migration != nil {
		return nil, nil, err
	}
	snap := &vmv1.VirtualMachineSnapshot{}
	if err := e.Kube.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, snap); apierrors.IsNotFound(err) {
		return nil, nil, nil
	} else if err != nil {
		return nil, nil, err
	}
	if snap.Spec.VMName != owner.VM.Name || snap.Status.Phase != vmv1.SnapshotInProgress || snap.Status.SourcePodUID != string(pod.UID) || snap.Status.CopierPod == "" {
		return nil, nil, nil
	}
	copier, err := e.Client.CoreV1().Pods(pod.Namespace).Get(ctx, snap.Status.CopierPod, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	ref := metav1.GetControllerOf(copier)
	switch {
	case ref == nil || ref.UID != snap.UID || copier.Labels[vmv1.LabelCopierOf] != snap.Name:
		return nil, nil, fmt.Errorf("pod %s/%s is not snapshot %s's copier: refused", copier.Namespace, copier.Name, snap.Name)
	case copier.Spec.NodeName != e.Node || copier.Status.Phase != corev1.PodRunning:
		return nil, nil, fmt.Errorf("snapshot %s's copier %s is not running on this node (%s) yet", snap.Name, copier.Name, e.Node)
	}
	return snap, copier, nil
}

// copy has the runner push its drives into the copier, through relays this agent holds open
// until the runner answers.
func (e *Executor) copy(ctx context.Context, pod *corev1.Pod, snap *vmv1.VirtualMachineSnapshot, copier *corev1.Pod, log *zap.Logger) (controlapi.BackupStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, e.Timeout)
	defer cancel()
	src, err := podcontrol.Lookup(ctx, e.PodResources, e.ControlDir, pod.Namespace, pod.Name)
	if err != nil {
		return controlapi.BackupStatus{}, err
	}
	dst, err := podcontrol.Lookup(ctx, e.PodResources, e.ControlDir, copier.Namespace, copier.Name)
	if err != nil {
		return controlapi.BackupStatus{}, fmt.Errorf("the copier's control directory: %w", err)
	}
	rc := podcontrol.NewClient(src, 0)
	defer rc.Close()
	req, err := e.request(ctx, rc, dst, snap)
	if err != nil {
		return controlapi.BackupStatus{}, err
	}
	relays := &relays{log: log}
	defer relays.close()
	for _, d := range req.Drives {
		if err := dst.WaitSocket(ctx, targetSocket(d.Drive), e.Ready); err != nil {
			return controlapi.BackupStatus{}, fmt.Errorf("the copier did not serve %s: see its log (%w)", targetSocket(d.Drive), err)
		}
		if err := relays.open(ctx, src, d.Socket, dst, targetSocket(d.Drive)); err != nil {
			return controlapi.BackupStatus{}, err
		}
	}
	return rc.Backup(ctx, req)
}

// request is the runner's backup request for the snapshot, after telling the copier each
// target's size (the runner's drives').
func (e *Executor) request(ctx context.Context, rc *podcontrol.Client, dst podcontrol.Control, snap *vmv1.VirtualMachineSnapshot) (controlapi.BackupRequest, error) {
	drives, err := rc.Drives(ctx)
	if err != nil {
		return controlapi.BackupRequest{}, err
	}
	size := map[string]int64{}
	for _, d := range drives {
		if !d.ReadOnly {
			size[d.Drive] = d.SizeBytes
		}
	}
	since := ""
	if snap.Status.Base != "" {
		base := &vmv1.VirtualMachineSnapshot{}
		if err := e.Kube.Get(ctx, types.NamespacedName{Namespace: snap.Namespace, Name: snap.Status.Base}, base); err != nil {
			return controlapi.BackupRequest{}, fmt.Errorf("reading base snapshot %s: %w", snap.Status.Base, err)
		}
		since = base.Status.Bitmap
	}
	req := controlapi.BackupRequest{Bitmap: snap.Status.Bitmap, Freeze: true}
	targets := map[string]int64{}
	for _, d := range snap.Status.Disks {
		drive := controlapi.DriveOf(d.Disk)
		if size[drive] == 0 {
			return controlapi.BackupRequest{}, fmt.Errorf("the guest has no writable drive %s (disk %s): the VM's pod predates its disk; restart the VM and snapshot again", drive, d.Disk)
		}
		targets[drive] = size[drive]
		req.Drives = append(req.Drives, controlapi.BackupDrive{Drive: drive, Socket: "snapshot-" + drive + ".sock", Since: since})
	}
	raw, _ := json.Marshal(targets)
	if err := dst.WriteFile(TargetsFile, raw); err != nil {
		return controlapi.BackupRequest{}, fmt.Errorf("telling the copier its targets' sizes: %w", err)
	}
	return req, nil
}

// answer writes the result into the runner pod, for the controller.
func (e *Executor) answer(ctx context.Context, pod *corev1.Pod, res controlapi.SnapshotResult) error {
	raw, err := json.Marshal(res)
	if err != nil {
		return err
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{vmv1.AnnotationSnapshotResult: string(raw)}}})
	if _, err := e.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return errors.Join(errors.New(res.Status.Error), fmt.Errorf("writing the snapshot's result to pod %s/%s: %w", pod.Namespace, pod.Name, err))
	}
	return nil
}

// answered says whether the pod has the result of the snapshot named.
func answered(pod *corev1.Pod, name string) bool {
	var res controlapi.SnapshotResult
	raw := pod.Annotations[vmv1.AnnotationSnapshotResult]
	return raw != "" && json.Unmarshal([]byte(raw), &res) == nil && res.Snapshot == name
}

// begin claims the pod's copy for this call; false when another worker has it, or this agent
// answered it already.
func (e *Executor) begin(uid types.UID, name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.active == nil {
		e.active = map[types.UID]string{}
	}
	if e.answered == nil {
		e.answered = map[types.UID]string{}
	}
	if _, busy := e.active[uid]; busy || e.answered[uid] == name {
		return false
	}
	e.active[uid] = name
	return true
}

func (e *Executor) forget(uid types.UID) {
	e.mu.Lock()
	delete(e.answered, uid)
	e.mu.Unlock()
}

// end releases the pod's copy; answered: its result is on the pod.
func (e *Executor) end(uid types.UID, name string, answered bool) {
	e.mu.Lock()
	delete(e.active, uid)
	if answered {
		e.answered[uid] = name
	}
	e.mu.Unlock()
}

// targetSocket is where the copier serves a drive's target.
func targetSocket(drive string) string { return "nbd-" + drive + ".sock" }
