// Package runnerpod reads a runner pod as everyone but its maker does: which container runs the
// runner, how it stands and ended, and what it was told (its argv, parsed by the runner's own
// flags: pkg/runnerconfig is the only parser). pkg/podspec renders the pod; the controllers,
// the node agent's executors and vmctl read it through here.
package runnerpod

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// Container is the pod's runner container, in place (a caller may edit a copy of the pod
// through it), or nil in a pod without one.
func Container(pod *corev1.Pod) *corev1.Container { return ContainerIn(&pod.Spec) }

// ContainerIn is Container of a pod spec being built (a migration target's, from its source's).
func ContainerIn(spec *corev1.PodSpec) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == vmv1.RunnerContainer {
			return &spec.Containers[i]
		}
	}
	return nil
}

// Status is the runner container's status as the kubelet reports it, or nil before it does.
func Status(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == vmv1.RunnerContainer {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// Terminated is how the runner container ended (its termination message carries the cause),
// or nil while it runs or before it ran.
func Terminated(pod *corev1.Pod) *corev1.ContainerStateTerminated {
	if s := Status(pod); s != nil {
		return s.State.Terminated
	}
	return nil
}

// Args are the runner's arguments as the pod holds them; nil without a runner container.
func Args(pod *corev1.Pod) []string {
	if c := Container(pod); c != nil {
		return c.Args
	}
	return nil
}

// Has says whether the runner was given the boolean flag (runnerconfig.GuestAgentFlag).
func Has(pod *corev1.Pod, flag string) bool { return slices.Contains(Args(pod), flag) }

// Value is the value the runner was given for flag (--flag=value; the last one, as the flag
// package reads it), and whether it was given: one flag read without the whole of Config, for a
// pod whose other arguments may not read (a test's partial pod, another version's flags).
func Value(pod *corev1.Pod, flag string) (string, bool) {
	vs := Values(pod, flag)
	if len(vs) == 0 {
		return "", false
	}
	return vs[len(vs)-1], true
}

// Values are the values of a repeatable flag (--disk, --filesystem), in order.
func Values(pod *corev1.Pod, flag string) []string {
	var vs []string
	for _, a := range Args(pod) {
		if f, value, eq := strings.Cut(a, "="); eq && f == flag {
			vs = append(vs, value)
		}
	}
	return vs
}

// Config is what the runner was told: its arguments read, defaulted and validated as the
// runner does (runnerconfig.Parse). An argument these flags do not know (a pod made by another
// version) is an error, which a reader treats as "not known".
func Config(pod *corev1.Pod) (runnerconfig.Config, error) {
	return runnerconfig.Parse(Args(pod))
}

// SlotDisks are the disks the pod's runner was started with on hotplug slots (--disk …,slot=),
// each slot by disk name: the ones the pod holds itself (docs/hotplug.md).
func SlotDisks(pod *corev1.Pod) map[string]int {
	slots := map[string]int{}
	for _, v := range Values(pod, "--disk") {
		if d, err := runnerconfig.ParseDisk(v); err == nil && d.Hotplug {
			slots[d.Name] = d.Slot
		}
	}
	return slots
}
