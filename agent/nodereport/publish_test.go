package nodereport

// These tests run against a real kube-apiserver (tests/kubeapi): labels are merge-patched,
// the HypervisorNode is created with its owner and its status written through the status
// subresource, all as the API server decides.

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(m, &env) }

func status(kvm vmv1.KVMState, qemu bool, at time.Time) vmv1.HypervisorNodeStatus {
	return vmv1.HypervisorNodeStatus{
		HeartbeatTime: metav1.NewTime(at),
		Arch:          "amd64",
		KVM:           vmv1.KVMStatus{State: kvm, Reason: "why", Device: "/dev/kvm"},
		Emulation:     vmv1.EmulationStatus{Available: qemu},
		Providers: []vmv1.ProviderStatus{
			{Name: vmv1.ProviderQEMU, Available: qemu, Version: "7.2.22"},
			{Name: vmv1.ProviderCloudHypervisor, Reason: "provider binary not found: cloud-hypervisor (/usr/bin/cloud-hypervisor)"},
		},
	}
}

func TestPublish(t *testing.T) {
	ctx := context.Background()
	c := env.Client
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"other": "x", vmv1.LabelKVM: "true"}}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	p := &Publisher{Client: c, Node: "n1"}
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

	res, err := p.Publish(ctx, status(vmv1.KVMUnusable, true, t0))
	if err != nil {
		t.Fatal(err)
	}
	if !res.LabelsPatched || !res.Created {
		t.Errorf("first publish %+v, want labels patched and object created", res)
	}
	got := &corev1.Node{}
	_ = c.Get(ctx, client.ObjectKey{Name: "n1"}, got)
	want := map[string]string{"other": "x", vmv1.LabelKVM: "false", vmv1.LabelEmulation: "true",
		"provider.virtpod.io/qemu": "true", "provider.virtpod.io/cloud-hypervisor": "false"}
	for k, v := range want {
		if got.Labels[k] != v {
			t.Errorf("label %s = %q, want %q (labels %v)", k, got.Labels[k], v, got.Labels)
		}
	}
	hn := &vmv1.HypervisorNode{}
	if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, hn); err != nil {
		t.Fatal(err)
	}
	if hn.Status.KVM.State != vmv1.KVMUnusable || len(hn.Status.Providers) != 2 || !hn.Status.HeartbeatTime.Time.Equal(t0) {
		t.Errorf("status %+v", hn.Status)
	}
	if len(hn.OwnerReferences) != 1 || hn.OwnerReferences[0].UID != node.UID {
		t.Errorf("owner references %+v", hn.OwnerReferences)
	}

	// Same results later: no label write, no create; only the heartbeat moves.
	rv := got.ResourceVersion
	res, err = p.Publish(ctx, status(vmv1.KVMUnusable, true, t0.Add(30*time.Second)))
	if err != nil || res.LabelsPatched || res.Created {
		t.Errorf("unchanged publish %+v, %v", res, err)
	}
	_ = c.Get(ctx, client.ObjectKey{Name: "n1"}, got)
	if got.ResourceVersion != rv {
		t.Error("the node was written though no label changed")
	}
	_ = c.Get(ctx, client.ObjectKey{Name: "n1"}, hn)
	if !hn.Status.HeartbeatTime.Time.Equal(t0.Add(30 * time.Second)) {
		t.Errorf("heartbeat %v not updated", hn.Status.HeartbeatTime)
	}

	// QEMU goes away: its label flips, others stay.
	res, err = p.Publish(ctx, status(vmv1.KVMUnusable, false, t0.Add(time.Minute)))
	if err != nil || !res.LabelsPatched {
		t.Errorf("changed publish %+v, %v", res, err)
	}
	_ = c.Get(ctx, client.ObjectKey{Name: "n1"}, got)
	if got.Labels["provider.virtpod.io/qemu"] != "false" || got.Labels["other"] != "x" {
		t.Errorf("labels %v", got.Labels)
	}
}

func TestPublishNoNode(t *testing.T) {
	p := &Publisher{Client: env.Client, Node: "missing"}
	if _, err := p.Publish(context.Background(), status(vmv1.KVMAbsent, true, time.Now())); err == nil {
		t.Error("no error for a missing node")
	}
}
