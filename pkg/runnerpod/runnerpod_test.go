package runnerpod_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

func pod(args ...string) *corev1.Pod {
	return &corev1.Pod{
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sidecar", Args: []string{"--cpus=9"}}, {Name: vmv1.RunnerContainer, Args: args}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
			{Name: "sidecar", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 9}}},
			{Name: vmv1.RunnerContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Message: "boom"}}},
		}},
	}
}

// TestRunnerContainer: the runner's container, status and end, never another container's; a
// pod without a runner has none of them.
func TestRunnerContainer(t *testing.T) {
	p := pod("--cpus=2")
	if c := runnerpod.Container(p); c == nil || c.Args[0] != "--cpus=2" {
		t.Fatalf("Container = %+v", c)
	}
	runnerpod.Container(p).Image = "edited"
	if p.Spec.Containers[1].Image != "edited" {
		t.Errorf("Container is a copy; callers edit the pod through it")
	}
	if tm := runnerpod.Terminated(p); tm == nil || tm.ExitCode != 3 || tm.Message != "boom" {
		t.Errorf("Terminated = %+v", tm)
	}
	none := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "other"}}}}
	if runnerpod.Container(none) != nil || runnerpod.Status(none) != nil || runnerpod.Terminated(none) != nil || runnerpod.Args(none) != nil {
		t.Errorf("a pod without a runner container has a runner")
	}
	running := pod()
	running.Status.ContainerStatuses[1].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	if runnerpod.Terminated(running) != nil {
		t.Errorf("a running runner has ended")
	}
}

// TestConfig: the runner's arguments, read by its own flags; a flag this runner does not know
// is an error, not a guess.
func TestConfig(t *testing.T) {
	want := runnerconfig.Config{Name: "web", Provider: runnerconfig.ProviderQEMU, GuestSize: vmv1.GuestSize{CPUs: 2, MemoryMiB: 512}, Network: vmv1.NetworkMasquerade, GuestAgent: true, Machine: "pc-q35-7.2",
		Kernel: "/k", RootDisk: "/d", StateDir: runnerconfig.DefaultStateDir, HTTPAddr: runnerconfig.DefaultHTTPAddr, GracePeriodSeconds: 30}
	p := pod(want.Args()...)
	got, err := runnerpod.Config(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.CPUs != 2 || got.MemoryMiB != 512 || got.Network != vmv1.NetworkMasquerade || !got.GuestAgent || got.Machine != "pc-q35-7.2" {
		t.Errorf("Config = %+v", got)
	}
	if !runnerpod.Has(p, runnerconfig.GuestAgentFlag) || runnerpod.Has(pod("--cpus=1"), runnerconfig.GuestAgentFlag) {
		t.Errorf("Has(%s) wrong", runnerconfig.GuestAgentFlag)
	}
	if v, ok := runnerpod.Value(pod("--cpus=1", "--machine=q35", "--machine=pc-q35-7.2"), "--machine"); !ok || v != "pc-q35-7.2" {
		t.Errorf("Value(--machine) = %q, %v; want the last one", v, ok)
	}
	if _, ok := runnerpod.Value(pod("--cpus=1"), "--machine"); ok {
		t.Errorf("Value of a flag not given")
	}
	if _, err := runnerpod.Config(pod("--cpus=1", "--from-the-future=1")); err == nil || !strings.Contains(err.Error(), "from-the-future") {
		t.Errorf("an unknown flag: %v", err)
	}
}
