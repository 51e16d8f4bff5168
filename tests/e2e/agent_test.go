package e2e

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

const kvmResource = corev1.ResourceName("devices.virtpod.io/kvm")

// TestNodeAgent: the agent DaemonSet from config/default runs unprivileged on the node, labels
// it with what the probe finds here (kvm-pvm, so KVM unusable; QEMU 7.2 with TCG; no
// cloud-hypervisor), publishes a fresh HypervisorNode, and registers devices.virtpod.io/kvm
// with none allocatable.
func TestNodeAgent(t *testing.T) {
	ctx := context.Background()
	var pod corev1.Pod
	eventually(t, "virtpod-agent pod Running", 3*time.Minute, func() error {
		pods := &corev1.PodList{}
		if err := kube.List(ctx, pods, client.InNamespace("virtpod-system"), client.MatchingLabels{"app.kubernetes.io/name": "virtpod-agent"}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				pod = p
				return nil
			}
		}
		return fmt.Errorf("%d agent pods, none Running", len(pods.Items))
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent logs:\n%s", podLogs(pod.Namespace, pod.Name))
			out, _ := run("get", "hypervisornodes", "-o", "yaml")
			t.Logf("hypervisornodes:\n%s", out)
		}
	})
	nodeName := pod.Spec.NodeName

	wantLabels := map[string]string{
		vmv1.LabelKVM:                          "false",
		vmv1.LabelEmulation:                    "true",
		"provider.virtpod.io/qemu":             "true",
		"provider.virtpod.io/cloud-hypervisor": "false",
	}
	eventually(t, "node labels", time.Minute, func() error {
		node := &corev1.Node{}
		if err := kube.Get(ctx, client.ObjectKey{Name: nodeName}, node); err != nil {
			return err
		}
		for k, v := range wantLabels {
			if node.Labels[k] != v {
				return fmt.Errorf("label %s=%q, want %q (labels %v)", k, node.Labels[k], v, node.Labels)
			}
		}
		return nil
	})

	hn := &vmv1.HypervisorNode{}
	eventually(t, "HypervisorNode with a fresh heartbeat", time.Minute, func() error {
		if err := kube.Get(ctx, client.ObjectKey{Name: nodeName}, hn); err != nil {
			return err
		}
		if age := time.Since(hn.Status.HeartbeatTime.Time); hn.Status.HeartbeatTime.IsZero() || age > 2*time.Minute {
			return fmt.Errorf("heartbeat %v (%v old)", hn.Status.HeartbeatTime, age)
		}
		return nil
	})
	st := hn.Status
	t.Logf("HypervisorNode %s: kvm %+v emulation %+v providers %+v arch %s kernel %s", hn.Name, st.KVM, st.Emulation, st.Providers, st.Arch, st.KernelVersion)
	if st.KVM.State != vmv1.KVMUnusable || st.KVM.Reason == "" {
		t.Errorf("kvm %+v, want Unusable with a reason", st.KVM)
	}
	if !st.Emulation.Available {
		t.Errorf("emulation %+v, want available", st.Emulation)
	}
	if st.Arch != "amd64" || st.KernelVersion == "" {
		t.Errorf("arch %q kernel %q", st.Arch, st.KernelVersion)
	}
	providers := map[vmv1.Provider]vmv1.ProviderStatus{}
	for _, p := range st.Providers {
		providers[p.Name] = p
	}
	if q := providers[vmv1.ProviderQEMU]; !q.Available || !regexp.MustCompile(`^7\.2\.\d+$`).MatchString(q.Version) {
		t.Errorf("qemu %+v, want available, version 7.2.x", q)
	}
	want := "provider binary not found: cloud-hypervisor (/usr/bin/cloud-hypervisor)"
	if ch := providers[vmv1.ProviderCloudHypervisor]; ch.Available || ch.Reason != want {
		t.Errorf("cloud-hypervisor %+v, want unavailable: %s", ch, want)
	}
	if len(hn.OwnerReferences) != 1 || hn.OwnerReferences[0].Kind != "Node" || hn.OwnerReferences[0].Name != nodeName {
		t.Errorf("owner references %+v, want the node", hn.OwnerReferences)
	}

	// The kubelet publishes a registered plugin's resource in capacity; unhealthy devices are
	// not allocatable.
	eventually(t, "devices.virtpod.io/kvm in the node's capacity", time.Minute, func() error {
		node := &corev1.Node{}
		if err := kube.Get(ctx, client.ObjectKey{Name: nodeName}, node); err != nil {
			return err
		}
		c, ok := node.Status.Capacity[kvmResource]
		if !ok {
			return fmt.Errorf("capacity %v", node.Status.Capacity)
		}
		a := node.Status.Allocatable[kvmResource]
		if !a.IsZero() {
			return fmt.Errorf("allocatable %s = %s, want 0 (capacity %s)", kvmResource, a.String(), c.String())
		}
		return nil
	})

	// The heartbeat moves: the agent writes it every interval (30 s).
	before := hn.Status.HeartbeatTime
	eventually(t, "a newer heartbeat", 75*time.Second, func() error {
		if err := kube.Get(ctx, client.ObjectKey{Name: nodeName}, hn); err != nil {
			return err
		}
		if !before.Before(&hn.Status.HeartbeatTime) {
			return fmt.Errorf("heartbeat still %v", hn.Status.HeartbeatTime)
		}
		return nil
	})
}
