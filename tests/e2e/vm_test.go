package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

const (
	guestImage = "localhost/virtpod/guest:dev"
	// The same guest's kernel kept a bzImage, as images other tools build hold one.
	bzImageKernel = "localhost/virtpod/guest-bzimage:dev"
	marker        = "VIRTPOD-GUEST-READY"
)

func newVM(ns, name string) *vmv1.VirtualMachine {
	return &vmv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
		Spec: vmv1.VirtualMachineSpec{
			Acceleration:                  vmv1.AccelerationEmulated,
			TerminationGracePeriodSeconds: ptr.To[int64](20),
			Guest: vmv1.GuestSpec{
				CPUs: 1, Memory: resource.MustParse("256Mi"),
				KernelImage: guestImage,
				RootDisk:    vmv1.RootDisk{Image: guestImage, Size: ptr.To(resource.MustParse("512Mi"))},
				Ports:       []vmv1.Port{{Name: "http", Port: 80}},
			},
			// A small request so the tests fit a 2-core node beside the demo VM; the guest
			// may still use a whole core.
			PodResources: &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("448Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("448Mi")},
			},
		},
	}
}

func getVM(t *testing.T, ns, name string) *vmv1.VirtualMachine {
	t.Helper()
	vm := &vmv1.VirtualMachine{}
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, vm); err != nil {
		t.Fatal(err)
	}
	return vm
}

func waitRunning(t *testing.T, ns, name string, restarts int32) *vmv1.VirtualMachine {
	t.Helper()
	var vm *vmv1.VirtualMachine
	eventually(t, fmt.Sprintf("VM %s Running after %d restarts", name, restarts), 4*time.Minute, func() error {
		vm = getVM(t, ns, name)
		if vm.Status.Phase != vmv1.PhaseRunning || vm.Status.RestartCount != restarts || vm.Status.Node == "" || vm.Status.PodIP == "" {
			return fmt.Errorf("status %+v", vm.Status)
		}
		return nil
	})
	return vm
}

// TestVMLifecycle: apply → pod scheduled → guest boots → Running with node and IP → a guest port
// answers another pod at the VM's IP, in IPv4 and IPv6 (the cluster is dual-stack), directly
// and through a dual-stack Service → the runner's hypervisor is killed and runStrategy Always
// brings it back → deleting the VM shuts the guest down cleanly and removes the pod.
func TestVMLifecycle(t *testing.T) {
	parallelSafe(t)
	ctx := context.Background()
	ns := namespace(t)
	web := newVM(ns, "web")
	web.Spec.Guest.KernelImage = bzImageKernel
	if err := kube.Create(ctx, web); err != nil {
		t.Fatal(err)
	}
	vm := waitRunning(t, ns, "web", 0)
	pod := podspec.PodName("web")
	eventually(t, "guest console marker in the pod's logs", time.Minute, func() error {
		return contains(podLogs(ns, pod), marker)
	})
	kernel := unpackedKernel(t, "web")
	if c := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Ready condition: %+v", c)
	}
	// The node agent reported the guest's start on the pod as the runner saw it (the VM is
	// Running from it, before the kubelet's startup probe says so).
	eventually(t, "the guest's start on the runner pod", 30*time.Second, func() error {
		p := &corev1.Pod{}
		if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: pod}, p); err != nil {
			return err
		}
		at, err := time.Parse(time.RFC3339Nano, p.Annotations[vmv1.AnnotationGuestStarted])
		if err != nil || at.Before(p.CreationTimestamp.Add(-time.Second)) || at.After(time.Now()) {
			return fmt.Errorf("%s %q (pod created %v): %v", vmv1.AnnotationGuestStarted, p.Annotations[vmv1.AnnotationGuestStarted], p.CreationTimestamp, err)
		}
		return nil
	})

	// Another pod reaches the guest's HTTP server at the VM's IP.
	got := fetchFrom(t, ns, vm.Status.PodIP, 80)
	if err := contains(got, "virtpod guest web"); err != nil {
		t.Fatal(err)
	}
	reachedOverIPv6(t, ns, "web")
	// The node agent that plumbed the pod network serves its spoof guard's counters.
	agent := agentOn(t, ctx, vm.Status.Node)
	metrics := fetchPathFrom(t, ns, "metrics", agent.Status.PodIP, 9441, "/metrics")
	if err := contains(metrics, fmt.Sprintf(`virtpod_agent_spoofed_frames_dropped_total{counter="ip",namespace=%q,pod=%q}`, ns, pod)); err != nil {
		t.Errorf("the node agent's metrics: %v", err)
	}

	// Kill the hypervisor: the runner reports it, the controller restarts the guest.
	qemu := findQEMU(t, "web")
	if err := syscall.Kill(qemu, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	vm = waitRunning(t, ns, "web", 1)
	if vm.Status.LastTermination == nil || vm.Status.LastTermination.ExitCode == 0 || !strings.Contains(vm.Status.LastTermination.Message, "killed") {
		t.Fatalf("the restart's cause is not in status: %+v", vm.Status.LastTermination)
	}
	// The restarted guest boots the kernel the agent stored the first time, not a new unpacking.
	if again := unpackedKernel(t, "web"); again != kernel {
		t.Errorf("the restarted guest's QEMU loaded %s, want the stored %s again", again, kernel)
	}

	// Delete: the guest gets its ACPI power-down and the pod goes away.
	out := deleteAndFollow(t, vm, 2*time.Minute)
	if err := contains(out, "reboot: Power down"); err != nil {
		t.Fatalf("the guest did not power down cleanly: %v", err)
	}
}

// TestProviderBinaryMissing: a runner image without QEMU fails the VM with the runner's words.
func TestProviderBinaryMissing(t *testing.T) {
	parallelSafe(t)
	ns := namespace(t)
	vm := newVM(ns, "nohv")
	vm.Spec.RunnerImage = "localhost/virtpod/runner-nohypervisor:dev"
	vm.Spec.RunStrategy = vmv1.RunOnce
	if err := kube.Create(context.Background(), vm); err != nil {
		t.Fatal(err)
	}
	eventually(t, "VM Failed with the provider-not-found reason", 3*time.Minute, func() error {
		got := getVM(t, ns, "nohv")
		c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionReady)
		if got.Status.Phase != vmv1.PhaseFailed || c == nil {
			return fmt.Errorf("status %+v", got.Status)
		}
		return contains(c.Message, "provider binary not found: qemu-system-x86_64")
	})
}

// fetchFrom runs a toolbox pod that sends an HTTP GET to ip:port and returns what it printed.
// (busybox's wget, statically linked against glibc, crashes resolving even an IP literal; nc
// does not resolve.)
func fetchFrom(t *testing.T, ns, ip string, port int) string {
	t.Helper()
	return fetchPathFrom(t, ns, "client", ip, port, "/")
}

// fetchPathFrom is fetchFrom for another path, from a pod of another name.
func fetchPathFrom(t *testing.T, ns, name, ip string, port int, path string) string {
	t.Helper()
	return runPod(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "http", Image: "localhost/virtpod/toolbox:dev",
			Command: []string{"sh", "-c", askGuest(ip, port, path)}}}},
	})
}

// askGuest is a shell command for a toolbox pod: an HTTP GET of path from host:port, its answer
// printed. A guest's services start after its VM reads Running (the kernel's start is what the
// runner reports), so it asks again each second, for up to a minute, while nothing answers, and
// says on stderr how long it waited; it fails when nothing answered.
func askGuest(host string, port int, path string) string {
	return fmt.Sprintf(`start=$(date +%%s)
until out=$(printf 'GET %[1]s HTTP/1.0\r\n\r\n' | nc -w 5 %[2]s %[3]d) && [ -n "$out" ]; do
  if [ $(( $(date +%%s) - start )) -ge 60 ]; then echo "no answer from %[2]s:%[3]d within 60 s" >&2; exit 1; fi
  sleep 1
done
waited=$(( $(date +%%s) - start )); if [ $waited -gt 0 ]; then echo "%[2]s:%[3]d answered after ${waited}s" >&2; fi
printf '%%s\n' "$out"`, path, host, port)
}

// unpackedKernel: the VM's kernel image holds a bzImage, which the runner handed to the node
// agent with its network namespace; QEMU loaded the PVH kernel the agent unpacked into its
// store (the agent pod's emptyDir at /var/cache/virtpod/kernels), from that file (mapped),
// holding no copy of the bzImage. It returns which file.
func unpackedKernel(t *testing.T, vmName string) string {
	t.Helper()
	var path string
	eventually(t, "QEMU loading the agent's unpacked kernel", 30*time.Second, func() error {
		pid := findQEMU(t, vmName)
		args, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			return err
		}
		if !strings.Contains(string(args), "-kernel\x00/proc/self/fd/") {
			return fmt.Errorf("QEMU's -kernel is not a descriptor the runner handed it: %s", strings.ReplaceAll(string(args), "\x00", " "))
		}
		maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
		if err != nil {
			return err
		}
		// The path as the agent's container sees its store (maps names a file by the mount
		// namespace it was opened in), with the inode: which file it is.
		for _, l := range strings.Split(string(maps), "\n") {
			if f := strings.Fields(l); len(f) == 6 && strings.HasPrefix(f[5], "/var/cache/virtpod/kernels/") && strings.HasSuffix(f[5], ".vmlinux") {
				path = f[5] + " (inode " + f[4] + ")"
				return nil
			}
		}
		return errors.New("QEMU maps no kernel from the node agent's store")
	})
	return path
}

// findQEMU finds the host pid of the VM's hypervisor (the test runs on the node as root).
func findQEMU(t *testing.T, vmName string) int {
	t.Helper()
	pids := processes(func(args []string) bool {
		return strings.HasSuffix(args[0], "qemu-system-x86_64") && slices.Contains(args, "guest="+vmName)
	})
	if len(pids) == 0 {
		t.Fatalf("no qemu-system-x86_64 process for VM %s", vmName)
	}
	return pids[0]
}

// processes lists the node's processes whose argv match.
func processes(match func(args []string) bool) []int {
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if match(strings.Split(string(b), "\x00")) {
			var pid int
			fmt.Sscanf(filepath.Base(filepath.Dir(p)), "%d", &pid)
			pids = append(pids, pid)
		}
	}
	return pids
}

// followLogs streams the pod's logs until the container ends.
func followLogs(t *testing.T, ns, pod string) <-chan string {
	t.Helper()
	cmd := exec.Command(kubectl, "-n", ns, "logs", "-f", pod)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 1)
	attached := make(chan struct{})
	go func() {
		var b strings.Builder
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if b.Len() == 0 {
				close(attached) // the first line means kubectl is streaming
			}
			b.WriteString(sc.Text() + "\n")
		}
		_ = cmd.Wait()
		out <- b.String()
	}()
	select {
	case <-attached:
	case <-time.After(30 * time.Second):
		t.Fatal("kubectl logs -f printed nothing")
	}
	return out
}
