package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/runner/kvm"
)

const (
	kvmResource      = vmv1.ResourceKVM
	kvmProbeResource = vmv1.ResourceKVMProbe
)

// runningPod waits for a Running pod of the DaemonSet labelled name in virtpod-system.
func runningPod(t *testing.T, ctx context.Context, name string) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	eventually(t, name+" pod Running", 3*time.Minute, func() error {
		pods := &corev1.PodList{}
		if err := kube.List(ctx, pods, client.InNamespace("virtpod-system"), client.MatchingLabels{"app.kubernetes.io/name": name}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				pod = p
				return nil
			}
		}
		return fmt.Errorf("%d %s pods, none Running", len(pods.Items), name)
	})
	return pod
}

// agentOn is the Running virtpod-agent pod on node.
func agentOn(t *testing.T, ctx context.Context, node string) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	eventually(t, "virtpod-agent Running on "+node, 3*time.Minute, func() error {
		pods := &corev1.PodList{}
		if err := kube.List(ctx, pods, client.InNamespace("virtpod-system"), client.MatchingLabels{"app.kubernetes.io/name": "virtpod-agent"}); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				pod = p
				return nil
			}
		}
		return fmt.Errorf("no Running agent on %s among %d", node, len(pods.Items))
	})
	return pod
}

// TestNodeAgent: the device-plugin and agent DaemonSets from config/default run unprivileged
// on the node; the agent gets /dev/kvm through devices.virtpod.io/kvm-probe and so reports the
// host's own KVM verdict (kvm_pvm here, so KVM unusable, the reason `virtpod-agent probe` gives
// on the host; the runner image's QEMU 10.0 with TCG; no cloud-hypervisor), labels the node, publishes a fresh
// HypervisorNode, and devices.virtpod.io/kvm is registered with none allocatable.
func TestNodeAgent(t *testing.T) {
	ctx := context.Background()
	dpPod := runningPod(t, ctx, "virtpod-device-plugin")
	pod := runningPod(t, ctx, "virtpod-agent")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("device plugin logs:\n%s", podLogs(dpPod.Namespace, dpPod.Name))
			t.Logf("agent logs:\n%s", podLogs(pod.Namespace, pod.Name))
			out, _ := run("get", "hypervisornodes", "-o", "yaml")
			t.Logf("hypervisornodes:\n%s", out)
		}
	})
	nodeName := pod.Spec.NodeName

	// The host's own verdict, as `virtpod-agent probe` gives it here (kvm_pvm: Unusable).
	host := kvm.Probe(ctx, kvm.Options{}).Status()
	t.Logf("this host's KVM: %+v", host)
	wantLabels := map[string]string{
		vmv1.LabelKVM:                          strconv.FormatBool(host.State == vmv1.KVMUsable),
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
	// Not the container's "operation not permitted" of an agent without the device.
	if st.KVM.State != host.State || st.KVM.Reason != host.Reason {
		t.Errorf("kvm %+v, want the host's %s: %s", st.KVM, host.State, host.Reason)
	}
	if strings.Contains(st.KVM.Reason, "operation not permitted") {
		t.Errorf("kvm reason %q: the agent could not open /dev/kvm", st.KVM.Reason)
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
	// The agent probes the QEMU of the image it runs from: the default runner's, Debian 13's.
	if q := providers[vmv1.ProviderQEMU]; !q.Available || !regexp.MustCompile(`^10\.0\.\d+$`).MatchString(q.Version) {
		t.Errorf("qemu %+v, want available, version 10.0.x (the runner image's)", q)
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
	// kvm-probe: 1, always allocatable (the agent holds it). kvm: 64, none allocatable here.
	eventually(t, "kvm-probe 1, kvm 64 (0 allocatable) and control 110 in the node's capacity", time.Minute, func() error {
		node := &corev1.Node{}
		if err := kube.Get(ctx, client.ObjectKey{Name: nodeName}, node); err != nil {
			return err
		}
		if c := node.Status.Capacity[kvmProbeResource]; c.Value() != 1 {
			return fmt.Errorf("capacity %s = %s, want 1 (capacity %v)", kvmProbeResource, c.String(), node.Status.Capacity)
		}
		if a := node.Status.Allocatable[kvmProbeResource]; a.Value() != 1 {
			return fmt.Errorf("allocatable %s = %s, want 1", kvmProbeResource, a.String())
		}
		if c := node.Status.Capacity[kvmResource]; c.Value() != 64 {
			return fmt.Errorf("capacity %s = %s, want 64 (capacity %v)", kvmResource, c.String(), node.Status.Capacity)
		}
		if a := node.Status.Allocatable[kvmResource]; !a.IsZero() {
			return fmt.Errorf("allocatable %s = %s, want 0", kvmResource, a.String())
		}
		// control: 110, always allocatable; every runner pod takes one (live resize).
		if a := node.Status.Allocatable[vmv1.ResourceControl]; a.Value() != 110 {
			return fmt.Errorf("allocatable %s = %s, want 110 (capacity %v)", vmv1.ResourceControl, a.String(), node.Status.Capacity)
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
