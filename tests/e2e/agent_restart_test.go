package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nodeagent "github.com/virtpod/virtpod/agent/nodereport"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// TestAgentRestart: the node agent's and the device plugin's pods are deleted, as a DaemonSet
// rollout or a crash replaces them, after what the agent publishes was removed: the new pods
// bring back the node labels and a fresh HypervisorNode with the host's own KVM verdict (which
// the agent gets only through the new device plugin's kvm-probe device), both resources are in
// the node's capacity again, a VM running meanwhile is not restarted and still answers at its IP
// (the new agent finds its network plumbed), and a VM created while the agent is away starts once
// the new agent has plumbed its pod's network.
func TestAgentRestart(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	if err := kube.Create(ctx, newVM(ns, "steady")); err != nil {
		t.Fatal(err)
	}
	before := waitRunning(t, ns, "steady", 0)
	agent := runningPod(t, ctx, "virtpod-agent")
	plugin := runningPod(t, ctx, "virtpod-device-plugin")
	node := agent.Spec.NodeName
	hn := &vmv1.HypervisorNode{}
	if err := kube.Get(ctx, client.ObjectKey{Name: node}, hn); err != nil {
		t.Fatal(err)
	}
	want := nodeagent.Labels(hn.Status)
	kvm := hn.Status.KVM

	// Remove what the agent publishes, so that only the new pods can bring it back.
	removed := time.Now()
	unset := map[string]any{}
	for k := range want {
		unset[k] = nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": unset}})
	if err := kube.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	if err := kube.Delete(ctx, hn); err != nil {
		t.Fatal(err)
	}
	for _, p := range []corev1.Pod{agent, plugin} {
		if err := kube.Delete(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	// A VM created while the agent is away: its runner waits for the new agent to plumb its
	// pod network, then boots.
	if err := kube.Create(ctx, newVM(ns, "late")); err != nil {
		t.Fatal(err)
	}

	eventually(t, "new agent and device-plugin pods", 3*time.Minute, func() error {
		for _, old := range []corev1.Pod{agent, plugin} {
			if p := runningPod(t, ctx, old.Labels["app.kubernetes.io/name"]); p.UID == old.UID {
				return fmt.Errorf("%s is still the old pod", p.Name)
			}
		}
		return nil
	})
	eventually(t, "labels, HypervisorNode and device resources back", 2*time.Minute, func() error {
		n := &corev1.Node{}
		if err := kube.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			return err
		}
		for k, v := range want {
			if n.Labels[k] != v {
				return fmt.Errorf("label %s=%q, want %q", k, n.Labels[k], v)
			}
		}
		if c := n.Status.Capacity[kvmProbeResource]; c.Value() != 1 {
			return fmt.Errorf("capacity %s = %s, want 1", kvmProbeResource, c.String())
		}
		if c := n.Status.Capacity[kvmResource]; c.Value() != 64 {
			return fmt.Errorf("capacity %s = %s, want 64", kvmResource, c.String())
		}
		got := &vmv1.HypervisorNode{}
		if err := kube.Get(ctx, client.ObjectKey{Name: node}, got); err != nil {
			return err
		}
		if got.UID == hn.UID || got.Status.HeartbeatTime.Time.Before(removed.Truncate(time.Second)) {
			return fmt.Errorf("HypervisorNode %s heartbeat %v: not the new agent's", got.UID, got.Status.HeartbeatTime)
		}
		if got.Status.KVM.State != kvm.State || got.Status.KVM.Reason != kvm.Reason {
			return fmt.Errorf("kvm %+v, want %+v as before", got.Status.KVM, kvm)
		}
		return nil
	})

	// The guest ran on: the same pod, no restart counted, its container never restarted.
	after := getVM(t, ns, "steady")
	pod, err := kubeset.CoreV1().Pods(ns).Get(ctx, podspec.PodName("steady"), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("runner pod: %v", err)
	}
	if after.Status.Phase != vmv1.PhaseRunning || after.Status.RestartCount != 0 || after.Status.PodUID != before.Status.PodUID ||
		string(pod.UID) != before.Status.PodUID {
		t.Fatalf("the VM was disturbed: before %+v, after %+v, pod %s", before.Status, after.Status, pod.UID)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			t.Fatalf("container %s restarted %d times", cs.Name, cs.RestartCount)
		}
	}
	// Its network too: the new agent found it plumbed and changed nothing.
	if err := contains(fetchFrom(t, ns, after.Status.PodIP, 80), "virtpod guest steady"); err != nil {
		t.Fatalf("the guest after the agent's restart: %v", err)
	}
	waitRunning(t, ns, "late", 0)
	if err := contains(podLogs(ns, podspec.PodName("late")), `"pod network plumbed by the node agent"`); err != nil {
		t.Fatalf("the VM created while the agent was away: %v", err)
	}
}
