package hotplug

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/virtpod/virtpod/agent/podcontrol"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// notYet is an attachment that may serve later (its pod starting, its socket not there yet):
// the hotplug is tried again, and a disk the guest has meanwhile is kept.
type notYet struct{ msg string }

func (n *notYet) Error() string { return n.msg }

func later(format string, a ...any) error { return &notYet{fmt.Sprintf(format, a...)} }

// request is what the guest should have: the VM's status.disks but those on their way out, an
// attached disk's socket linked into the runner's directory (ctl). A disk whose attachment is
// refused is left out, and so is one not served yet unless the guest had it (prev): left says
// which and why (a kept one too). An error is the API server's: nothing is asked then.
func (e *Executor) request(ctx context.Context, pod *corev1.Pod, vm *vmv1.VirtualMachine, ctl podcontrol.Control, prev *controlapi.HotplugResult) (controlapi.HotplugRequest, []string, error) {
	req := controlapi.HotplugRequest{Disks: []controlapi.HotplugDisk{}}
	var left []string
	own := runnerpod.SlotDisks(pod)
	for _, d := range vm.Status.Disks {
		if d.State == vmv1.DiskDetaching {
			continue
		}
		hd := controlapi.HotplugDisk{Name: d.Name, Slot: int(d.Slot), ReadOnly: d.ReadOnly}
		if _, held := own[d.Name]; d.AttachmentPod == "" && !held {
			// Served by an attachment pod the status does not name yet (one being replaced):
			// the guest keeps what it has from the old one, or waits for the new one.
			hd.Socket = controlapi.HotplugSocket(d.Name)
			if !had(prev, d.Name) {
				left = append(left, fmt.Sprintf("disk %s: waiting for its attachment pod to run", d.Name))
				continue
			}
			left = append(left, fmt.Sprintf("disk %s: kept as the guest has it, while its attachment pod starts", d.Name))
		}
		if d.AttachmentPod != "" {
			hd.Socket = controlapi.HotplugSocket(d.Name)
			err := e.attach(ctx, pod, vm, d, ctl)
			var wait *notYet
			switch {
			case err == nil:
			case errors.As(err, &wait) && had(prev, d.Name):
				// Not now, but the guest has it: leaving it out would detach a served disk. It
				// is kept, and tried again until its attachment serves.
				left = append(left, fmt.Sprintf("disk %s: kept as the guest has it, but %v", d.Name, err))
			case errors.As(err, &wait) || errors.Is(err, errRefused):
				left = append(left, fmt.Sprintf("disk %s: %v", d.Name, err))
				continue
			default:
				return req, nil, err
			}
		}
		req.Disks = append(req.Disks, hd)
	}
	return req, left, nil
}

// had says whether the guest had disk name at the agent's last answer.
func had(prev *controlapi.HotplugResult, name string) bool {
	if prev == nil {
		return false
	}
	_, ok := prev.Status.Attached(name)
	return ok
}

// errRefused is in the error of an attachment pod the VM's objects do not vouch for.
var errRefused = errors.New("refused")

// attach links the socket of d's attachment pod into the runner's control directory, once the
// pod is the one the controller made for this runner pod and disk, on this node, and serves.
func (e *Executor) attach(ctx context.Context, runner *corev1.Pod, vm *vmv1.VirtualMachine, d vmv1.HotplugDiskStatus, ctl podcontrol.Control) error {
	att, err := e.Client.CoreV1().Pods(runner.Namespace).Get(ctx, d.AttachmentPod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return later("attachment pod %s does not exist (yet)", d.AttachmentPod)
	} else if err != nil {
		return fmt.Errorf("reading attachment pod %s/%s: %v", runner.Namespace, d.AttachmentPod, err) // not %w: its NotFound is not the runner pod's
	}
	if err := e.vouch(att, runner, vm, d.Name); err != nil {
		return err
	}
	src, err := podcontrol.Lookup(ctx, e.PodResources, e.ControlDir, att.Namespace, att.Name)
	if err != nil {
		return later("attachment pod %s's control directory: %v", att.Name, err)
	}
	if err := src.WaitSocket(ctx, controlapi.AttachmentSocket, e.Ready); err != nil {
		return later("attachment pod %s does not serve %s yet (see its log)", att.Name, controlapi.AttachmentSocket)
	}
	if err := src.LinkSocket(controlapi.AttachmentSocket, ctl, controlapi.HotplugSocket(d.Name)); errors.Is(err, podcontrol.ErrRefused) {
		return fmt.Errorf("attachment pod %s: %v: %w", att.Name, err, errRefused)
	} else if err != nil {
		return later("linking attachment pod %s's socket: %v", att.Name, err)
	}
	return nil
}

// vouch refuses an attachment pod the VM does not control, made for another VM, disk or runner
// pod, on another node, or over; one still starting is for later.
func (e *Executor) vouch(att, runner *corev1.Pod, vm *vmv1.VirtualMachine, disk string) error {
	ref := metav1.GetControllerOf(att)
	l := att.Labels
	switch {
	case ref == nil || ref.UID != vm.UID || l[vmv1.LabelAttachmentOf] != vm.Name:
		return fmt.Errorf("pod %s is not VirtualMachine %s's attachment pod: %w", att.Name, vm.Name, errRefused)
	case l[vmv1.LabelAttachedDisk] != disk || l[vmv1.LabelAttachedTo] != string(runner.UID):
		return fmt.Errorf("pod %s serves another disk or runner pod than disk %s of %s: %w", att.Name, disk, runner.Name, errRefused)
	case att.Spec.NodeName != e.Node && att.Spec.NodeName != "":
		return fmt.Errorf("attachment pod %s runs on node %s, not on the guest's (%s): %w", att.Name, att.Spec.NodeName, e.Node, errRefused)
	case att.DeletionTimestamp != nil || att.Status.Phase == corev1.PodSucceeded || att.Status.Phase == corev1.PodFailed:
		return fmt.Errorf("attachment pod %s has ended or is ending: %w", att.Name, errRefused)
	case att.Status.Phase != corev1.PodRunning:
		return later("attachment pod %s is %s, not running yet", att.Name, att.Status.Phase)
	}
	return nil
}
