package podspec

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// probeFlag is the runner's --readiness-probe value for a guest probe: tcp:PORT or
// http:PORT/PATH; "" for none.
func probeFlag(p *vmv1.GuestProbe) string {
	switch {
	case p == nil:
		return ""
	case p.TCPSocket != nil:
		return "tcp:" + strconv.Itoa(int(p.TCPSocket.Port))
	case p.HTTPGet != nil:
		path := p.HTTPGet.Path
		if path == "" {
			path = "/"
		}
		return "http:" + strconv.Itoa(int(p.HTTPGet.Port)) + path
	}
	return ""
}

// GuestProbe describes, in words, the guest readiness probe the pod's runner was given ("" for
// none): what the VM's Ready condition waits for. It reads the pod, not the VM, because the pod
// runs what it was built with even after the VM's spec changed.
func GuestProbe(pod *corev1.Pod) string {
	for _, c := range pod.Spec.Containers {
		if c.Name != RunnerContainer {
			continue
		}
		for _, a := range c.Args {
			v, ok := strings.CutPrefix(a, "--readiness-probe=")
			if !ok {
				continue
			}
			if port, ok := strings.CutPrefix(v, "tcp:"); ok {
				return "TCP port " + port
			}
			if rest, ok := strings.CutPrefix(v, "http:"); ok {
				port, path, _ := strings.Cut(rest, "/")
				return fmt.Sprintf("HTTP GET of /%s on port %s", path, port)
			}
			return v
		}
	}
	return ""
}
