package facts

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
)

// TestBooting: a guest is asked often until its agent answers and, with a cloud-init seed,
// until its cloud-init ended (the bootstrap's result, which Cluster API waits for), but not
// forever when the image has no cloud-init.
func TestBooting(t *testing.T) {
	now := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	pod := func(started time.Duration, args ...string) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "sidecar", Args: []string{"--cloud-init-user-data=/elsewhere"}},
			{Name: vmv1.RunnerContainer, Args: append([]string{"--name=w", "--guest-agent"}, args...)}}}}
		if started >= 0 {
			p.Status.StartTime = &metav1.Time{Time: now.Add(-started)}
		}
		return p
	}
	seed := "--cloud-init-user-data=/run/virtpod/user-data"
	connected := controlapi.Guest{Channel: true, Connected: true}
	pending := controlapi.Guest{Channel: true, Connected: true, Bootstrap: &vmv1.GuestBootstrap{}}
	done := controlapi.Guest{Channel: true, Connected: true, Bootstrap: &vmv1.GuestBootstrap{CloudInitDone: true, CloudInitErrors: []string{"runcmd failed"}}}
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		g    controlapi.Guest
		want bool
	}{
		{"no agent yet", pod(time.Hour), controlapi.Guest{Channel: true}, true},
		{"agent, no seed", pod(time.Minute), connected, false},
		{"agent, seed, cloud-init running", pod(time.Minute, seed), connected, true},
		{"agent, seed, sentinel read, cloud-init running", pod(time.Minute, seed), pending, true},
		{"agent, seed, cloud-init ended with errors", pod(time.Minute, seed), done, false},
		{"agent, seed, no start time yet", pod(-1, seed), connected, true},
		{"agent, seed, cloud-init never ends", pod(bootWindow, seed), connected, false},
		{"a seed on another container", pod(time.Minute), connected, false},
	} {
		if got := booting(c.pod, c.g, now); got != c.want {
			t.Errorf("%s: booting %v, want %v", c.name, got, c.want)
		}
	}
}
