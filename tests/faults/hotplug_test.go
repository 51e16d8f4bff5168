package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestHotplugUnderControllerKills: running VMs each get a hotpluggable disk on a claim of their
// own, then lose it, while the controller is SIGKILLed again and again; the simulated node plays
// the node agent. Afterwards each guest has its disk attached once (status Attached on slot 0,
// exactly one attachment pod, on the guest's node, for its runner pod), and after the detach none
// and no attachment pod is left; every guest ran on in the pod it had before, throughout.
func TestHotplugUnderControllerKills(t *testing.T) {
	const n, lives = 12, 6
	rnd := rand.New(rand.NewPCG(faultSeed(t), 4))
	s := newScene(t, "hot-1", "hot-2")
	s.kubelets.PlayHotplug(env.Client)
	ctx := context.Background()
	for i := range n {
		if err := kubeapi.BoundClaim(ctx, env.Client, s.ns, vmName(i)+"-hot"); err != nil {
			t.Fatal(err)
		}
		s.createVM(ctx, t, vmName(i), nil)
	}
	c := s.startController(t)
	s.converged(t, n, time.Minute, nil)
	pods := s.podUIDs(ctx, t)
	c.kill()

	s.underKills(t, rnd, lives, n, func(i int) string {
		return fmt.Sprintf(`{"spec":{"guest":{"disks":[{"name":"hot","hotplug":true,"persistentVolumeClaim":{"claimName":%q}}]}}}`, vmName(i)+"-hot")
	})
	c = s.startController(t)
	kubeapi.Eventually(t, "every guest has its disk, served once", 2*time.Minute, func() error {
		return s.hotplugged(ctx, t, n, pods, "hot:Attached:0:")
	})
	c.kill()

	s.underKills(t, rnd, lives, n, func(int) string { return `{"spec":{"guest":{"disks":null}}}` })
	c = s.startController(t)
	kubeapi.Eventually(t, "every disk detached, no attachment pod left", 2*time.Minute, func() error {
		return s.hotplugged(ctx, t, n, pods, "")
	})
	c.kill()
}

// podUIDs are the VMs' runner pods' UIDs, by VM.
func (s *scene) podUIDs(ctx context.Context, t *testing.T) map[string]string {
	t.Helper()
	uids := map[string]string{}
	vms := &vmv1.VirtualMachineList{}
	if err := env.Client.List(ctx, vms, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	for _, vm := range vms.Items {
		uids[vm.Name] = vm.Status.PodUID
	}
	return uids
}

// hotplugged checks that every VM still runs in the pod it had (pods), that its status.disks
// reads want (name:state:slot: with the attachment pod's name appended, or "" for none), and
// that the attachment pods are exactly those: one per VM with a disk, on the guest's node, for
// its runner pod.
func (s *scene) hotplugged(ctx context.Context, t *testing.T, n int, pods map[string]string, want string) error {
	list := &corev1.PodList{}
	if err := env.Client.List(ctx, list, client.InNamespace(s.ns), client.HasLabels{vmv1.LabelAttachmentOf}); err != nil {
		return err
	}
	attachments := map[string]*corev1.Pod{}
	for i := range list.Items {
		p := &list.Items[i]
		if other := attachments[p.Labels[vmv1.LabelAttachmentOf]]; other != nil {
			return fmt.Errorf("two attachment pods for %s: %s and %s", p.Labels[vmv1.LabelAttachmentOf], other.Name, p.Name)
		}
		attachments[p.Labels[vmv1.LabelAttachmentOf]] = p
	}
	for i := range n {
		vm := getVM(t, s.ns, vmName(i))
		if vm.Status.PodUID != pods[vm.Name] || vm.Status.Phase != vmv1.PhaseRunning {
			return fmt.Errorf("%s: %s in pod %s, was %s: the guest did not run on", vm.Name, vm.Status.Phase, vm.Status.PodUID, pods[vm.Name])
		}
		got := ""
		for _, d := range vm.Status.Disks {
			got += fmt.Sprintf("%s:%s:%d:%s", d.Name, d.State, d.Slot, d.AttachmentPod)
		}
		a := attachments[vm.Name]
		switch {
		case want == "" && (got != "" || a != nil):
			return fmt.Errorf("%s: status.disks %q, attachment pod %v; want none", vm.Name, got, a != nil)
		case want == "":
		case got != want+podspec.AttachmentPodName(vm.Name, "hot"):
			return fmt.Errorf("%s: status.disks %q %+v", vm.Name, got, vm.Status.Disks)
		case a == nil || a.DeletionTimestamp != nil:
			return fmt.Errorf("%s: no live attachment pod", vm.Name)
		case a.Spec.NodeName != vm.Status.Node || a.Labels[vmv1.LabelAttachedTo] != vm.Status.PodUID:
			return fmt.Errorf("%s: attachment pod %s on %s for %s; the guest runs on %s in %s", vm.Name, a.Name, a.Spec.NodeName, a.Labels[vmv1.LabelAttachedTo], vm.Status.Node, vm.Status.PodUID)
		}
	}
	return nil
}
