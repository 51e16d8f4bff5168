package podspec

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerpod"
)

// runnerProbeConfig is the runner's --readiness-probe for a guest probe; the zero Probe for none.
func runnerProbeConfig(p *vmv1.GuestProbe) runnerconfig.Probe {
	switch {
	case p == nil:
		return runnerconfig.Probe{}
	case p.TCPSocket != nil:
		return runnerconfig.Probe{Kind: runnerconfig.ProbeTCP, Port: p.TCPSocket.Port}
	case p.HTTPGet != nil:
		path := p.HTTPGet.Path
		if path == "" {
			path = "/"
		}
		return runnerconfig.Probe{Kind: runnerconfig.ProbeHTTP, Port: p.HTTPGet.Port, Path: path}
	}
	return runnerconfig.Probe{}
}

// GuestProbe describes, in words, the guest readiness probe the pod's runner was given ("" for
// none): what the VM's Ready condition waits for. It reads the pod, not the VM, because the pod
// runs what it was built with even after the VM's spec changed.
func GuestProbe(pod *corev1.Pod) string {
	v, ok := runnerpod.Value(pod, "--readiness-probe")
	if !ok {
		return ""
	}
	p, err := runnerconfig.ParseProbe(v)
	switch {
	case err != nil:
		return v
	case p.Kind == runnerconfig.ProbeTCP:
		return fmt.Sprintf("TCP port %d", p.Port)
	}
	return fmt.Sprintf("HTTP GET of %s on port %d", p.Path, p.Port)
}
