package network

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/virtpod/virtpod/agent/podcontrol/podcontroltest"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/handoff"
	"github.com/virtpod/virtpod/pkg/kernel/kernelcache"
	"github.com/virtpod/virtpod/pkg/kernel/pvhkernel"
	"github.com/virtpod/virtpod/pkg/kernel/pvhkernel/pvhkerneltest"
	"github.com/virtpod/virtpod/pkg/network/guestnet"
	"github.com/virtpod/virtpod/tests/kubeapi"
	"github.com/virtpod/virtpod/tests/prereq"
)

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(m, &env) }

// podNetns is a network namespace standing in for a pod's: eth0 (one end of a veth pair whose
// other end stays in the namespace) with ip/24 and a default route.
func podNetns(t *testing.T, ip string) *os.File {
	t.Helper()
	type made struct {
		f   *os.File
		err error
	}
	c := make(chan made, 1)
	go func() {
		runtime.LockOSThread() // the thread stays in the namespace and is never reused
		h, err := netns.New()
		if err != nil {
			c <- made{err: err}
			return
		}
		f := os.NewFile(uintptr(h), "netns")
		err = func() error {
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "peer0"}); err != nil {
				return err
			}
			l, _ := netlink.LinkByName("eth0")
			addr, _ := netlink.ParseAddr(ip + "/24")
			if err := netlink.AddrAdd(l, addr); err != nil {
				return err
			}
			for _, n := range []string{"eth0", "peer0"} {
				ln, _ := netlink.LinkByName(n)
				if err := netlink.LinkSetUp(ln); err != nil {
					return err
				}
			}
			gw := addr.IP.To4()
			gw = append(gw[:3:3], 1)
			return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw})
		}()
		c <- made{f: f, err: err}
	}()
	m := <-c
	if m.err != nil {
		t.Fatal(m.err)
	}
	t.Cleanup(func() { m.f.Close() })
	return m.f
}

// hasBridge says whether the namespace holds the guest's bridge.
func hasBridge(t *testing.T, ns *os.File) bool {
	t.Helper()
	found := false
	if err := guestnet.InNetns(int(ns.Fd()), func() error {
		_, err := netlink.LinkByName(guestnet.DefaultBridge)
		found = err == nil
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return found
}

// handoffRunner is a runner's end of the handoff, which only this executor speaks (the control
// API's fake is podcontroltest.Runner): it serves netns.sock in its control directory, handing
// over ns (and bz, a bzImage, when not nil), and reports what it heard from the agent: with bz,
// an error unless a PVH kernel came back.
func handoffRunner(t *testing.T, dir string, ns, bz *os.File) chan error {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	dup, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := handoff.ListenKernel(filepath.Join(dir, vmv1.NetnsSocketName), dup, bz)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	heard := make(chan error, 1)
	go func() {
		pl, err := srv.Wait(ctx)
		if err == nil && pl.Tap != guestnet.DefaultTap {
			err = fmt.Errorf("plumbing %+v", pl)
		}
		if err == nil && bz != nil {
			kernel := srv.Kernel()
			k := kernel.File
			if k == nil {
				err = fmt.Errorf("no kernel for the bzImage: %s", kernel.Refused)
			} else if _, kerr := pvhkernel.Trim(mustRead(k)); kerr != nil {
				err = fmt.Errorf("the kernel handed back: %w", kerr)
			}
		}
		heard <- err
	}()
	t.Cleanup(func() { cancel(); srv.Close() })
	return heard
}

func mustRead(f *os.File) []byte {
	defer f.Close()
	b, _ := io.ReadAll(f)
	return b
}

// bzImage is a small bzImage holding a PVH kernel, open as a runner opens its VM's kernel.
func bzImage(t *testing.T) *os.File {
	t.Helper()
	return pvhkerneltest.Open(t, pvhkerneltest.BzImage(pvhkerneltest.ELF([]byte("kernel text"), true), "gzip"))
}

func pod(t *testing.T, ns, name, ip string, mutate func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{vmv1.LabelManagedBy: vmv1.ManagedBy}},
		Spec: corev1.PodSpec{NodeName: "node-n", Containers: []corev1.Container{{Name: vmv1.RunnerContainer, Image: "runner",
			Args: []string{"--name=" + name, "--cpus=1", "--memory-mib=256", "--kernel=/k", "--root-disk=/d", "--network=pod"}}}}}
	if mutate != nil {
		mutate(p)
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	kubeapi.Eventually(t, "pod status", 10*time.Second, func() error {
		cur := &corev1.Pod{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil {
			return err
		}
		cur.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: vmv1.RunnerContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
		return env.Client.Status().Update(ctx, cur)
	})
	return p
}

// TestExecutorPlumbsOnlyTheControllersPods: the agent builds the guest's network in the
// namespace the VM's own runner pod hands over, and the runner hears the plumbing; a pod that
// only looks like a runner pod (the label, or an owner reference to a VM whose status names
// another pod) is never asked for its namespace, and a runner that hands over a namespace not
// holding its pod's IP is refused, that namespace left as it was. The VM's runner hands over its
// bzImage too and gets the PVH kernel inside it from the agent's store.
func TestExecutorPlumbsOnlyTheControllersPods(t *testing.T) {
	prereq.Need(t, os.Geteuid() == 0, "needs root: network namespaces")
	ns := podcontroltest.Namespace(t, env.Client, "net-")
	node := podcontroltest.NewNode(t, "node-n")

	vm := podcontroltest.VM(t, env.Client, ns, "web")
	real := pod(t, ns, "web-runner", "10.213.70.2", func(p *corev1.Pod) { podcontroltest.Own(p, vm) })
	podcontroltest.Name(t, env.Client, vm, real)
	labelled := pod(t, ns, "labelled-runner", "10.213.71.2", nil)
	sibling := pod(t, ns, "sibling-runner", "10.213.72.2", func(p *corev1.Pod) { podcontroltest.Own(p, vm) })
	other := podcontroltest.VM(t, env.Client, ns, "other")
	liar := pod(t, ns, "other-runner", "10.213.73.2", func(p *corev1.Pod) { podcontroltest.Own(p, other) })
	podcontroltest.Name(t, env.Client, other, liar)

	nets := map[string]*os.File{
		real.Name:     podNetns(t, "10.213.70.2"),
		labelled.Name: podNetns(t, "10.213.71.2"),
		sibling.Name:  podNetns(t, "10.213.72.2"),
		liar.Name:     podNetns(t, "10.213.99.2"), // not its pod's IP
	}
	heard := map[string]chan error{}
	for i, p := range []*corev1.Pod{real, labelled, sibling, liar} {
		var bz *os.File
		if p == real {
			bz = bzImage(t)
		}
		heard[p.Name] = handoffRunner(t, node.Dir(p, fmt.Sprintf("control%d", i+1)), nets[p.Name], bz)
	}
	kernels, err := kernelcache.New(filepath.Join(node.ControlDir, "kernels"), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	e := &Executor{Agent: node.Agent(t, env), Kernels: kernels}
	podcontroltest.Run(t, e.Run)

	select {
	case err := <-heard[real.Name]:
		if err != nil {
			t.Fatalf("the VM's runner: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the VM's runner heard nothing from the agent in 30s")
	}
	if !hasBridge(t, nets[real.Name]) {
		t.Fatal("no guest bridge in the VM's pod namespace")
	}
	select {
	case err := <-heard[liar.Name]:
		if err == nil || !strings.Contains(err.Error(), "not the pod's IP 10.213.73.2") {
			t.Fatalf("a runner handing over another namespace: %v, want the agent's refusal", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the runner handing over another namespace heard nothing in 30s")
	}
	// The look-alikes get a few seconds of the agent's retries: never asked.
	time.Sleep(3 * time.Second)
	for _, p := range []*corev1.Pod{labelled, sibling, liar} {
		select {
		case err := <-heard[p.Name]:
			t.Errorf("%s: its runner heard from the agent: %v", p.Name, err)
		default:
		}
		if hasBridge(t, nets[p.Name]) {
			t.Errorf("%s: the agent built in its namespace", p.Name)
		}
	}
}
