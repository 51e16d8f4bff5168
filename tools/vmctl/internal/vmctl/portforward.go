package vmctl

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

func (a *app) portForwardCmd() *cobra.Command {
	var addresses []string
	c := &cobra.Command{
		Use:   "port-forward VM [LOCAL:]GUEST...",
		Short: "Forward local ports to a VM's guest ports",
		Long: `Forward local ports to ports the guest serves, until Ctrl-C. Each GUEST port must be a TCP port
declared in the VM's spec.guest.ports: the runner relays exactly those from its pod's loopback to
the guest (docs/runner.md), which is where the API server's port-forward connects — so
` + "`kubectl port-forward pod/<vm>-runner LOCAL:GUEST`" + ` reaches the guest too. LOCAL defaults to GUEST;
":GUEST" or "0:GUEST" picks a free local port. Needs your permission to create pods/portforward
in the VM's namespace; the VM must have a running runner pod.`,
		Example:           "  vmctl port-forward web 8080:80\n  vmctl port-forward web :80 --address 0.0.0.0",
		Args:              minArgs(2),
		ValidArgsFunction: a.completeVMs,
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return a.portForward(ctx, args[0], args[1:], addresses, nil)
		},
	}
	c.Flags().StringSliceVar(&addresses, "address", []string{"localhost"}, "local addresses to listen on (comma-separated), as kubectl's")
	return c
}

// portForward forwards specs ([LOCAL:]GUEST) to the VM's runner pod until ctx ends. When ready
// is not nil it gets the local ports once they listen, in the order of specs.
func (a *app) portForward(ctx context.Context, name string, specs, addresses []string, ready func([]uint16)) error {
	ports := make([]string, len(specs))
	guests := make([]int32, len(specs))
	for i, s := range specs {
		local, guest, err := parseForward(s)
		if err != nil {
			return usageError{err}
		}
		ports[i], guests[i] = local+":"+strconv.Itoa(int(guest)), guest
	}
	cn, r, err := a.findRunner(name, false)
	if err != nil {
		return err
	}
	// The declared ports are checked before the pod's state: asking for one the runner does not
	// relay is a mistake whether or not the VM runs.
	for _, g := range guests {
		if err := declared(r.vm, g); err != nil {
			return err
		}
	}
	if !runnerRunning(r.pod) {
		return fmt.Errorf("VM %s is %s: its runner pod %s is %s, not running", r, r.vm.Status.Phase, r.pod.Name, r.pod.Status.Phase)
	}
	dialer, err := portForwardDialer(cn, r.pod)
	if err != nil {
		return err
	}
	readyCh := make(chan struct{})
	fw, err := portforward.NewOnAddressesForStreamingWithContext(ctx, dialer, addresses, ports, readyCh, a.stdout, a.stderr)
	if err != nil {
		return usageError{err}
	}
	if ready != nil {
		go func() {
			select {
			case <-readyCh:
			case <-ctx.Done():
				return
			}
			got, err := fw.GetPorts()
			if err != nil {
				return
			}
			local := make([]uint16, len(got))
			for i, p := range got {
				local[i] = p.Local
			}
			ready(local)
		}()
	}
	if err := fw.ForwardPorts(); err != nil && ctx.Err() == nil {
		return streamError("port-forward", r, err)
	}
	return nil
}

// parseForward reads [LOCAL:]GUEST; LOCAL "" or 0 asks for a free port.
func parseForward(s string) (local string, guest int32, err error) {
	l, g, found := strings.Cut(s, ":")
	if !found {
		l, g = s, s
	}
	gp, err := strconv.ParseUint(g, 10, 16)
	if err != nil || gp == 0 {
		return "", 0, fmt.Errorf("%q: want [LOCAL:]GUEST with GUEST a port number", s)
	}
	if l == "" {
		l = "0"
	}
	if _, err := strconv.ParseUint(l, 10, 16); err != nil {
		return "", 0, fmt.Errorf("%q: LOCAL %q is not a port number", s, l)
	}
	return l, int32(gp), nil
}

// declared checks that the runner relays guest port p: a TCP port of spec.guest.ports.
func declared(vm *vmv1.VirtualMachine, p int32) error {
	var list []string
	for _, d := range vm.Spec.Guest.Ports {
		proto := d.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		if d.Port == p && proto == corev1.ProtocolTCP {
			return nil
		}
		list = append(list, fmt.Sprintf("%d/%s (%s)", d.Port, proto, d.Name))
	}
	slices.Sort(list)
	if len(list) == 0 {
		return fmt.Errorf("VM %s/%s declares no ports, so the runner relays none: add {name: ..., port: %d} to spec.guest.ports", vm.Namespace, vm.Name, p)
	}
	return fmt.Errorf("guest port %d/TCP is not declared in spec.guest.ports of VM %s/%s (declared: %s); the runner relays only declared TCP ports", p, vm.Namespace, vm.Name, strings.Join(list, ", "))
}

// portForwardDialer follows kubectl: SPDY tunnelled over WebSocket first, plain SPDY for API
// servers that cannot upgrade to it.
func portForwardDialer(cn *conn, pod *corev1.Pod) (streamhttp.Dialer, error) {
	u := cn.cs.CoreV1().RESTClient().Post().Namespace(pod.Namespace).Resource("pods").Name(pod.Name).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(cn.cfg)
	if err != nil {
		return nil, err
	}
	plain := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	tunnel, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, cn.cfg)
	if err != nil {
		return nil, err
	}
	return portforward.NewFallbackDialerForStreaming(tunnel, plain, func(err error) bool {
		return streamhttp.IsUpgradeFailure(err) || streamhttp.IsHTTPSProxyError(err)
	}), nil
}
