package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// BenchmarkVMOverhead measures, on the local cluster, what a running VM's pod costs in memory
// beyond the guest's RAM: the pod cgroup's usage and working set, and the resident memory of the
// runner and of QEMU (split into the guest's RAM, TCG's translation cache and QEMU's own), for a
// 256 MiB and a 1 GiB emulated guest, idle after boot and after the guest wrote all the memory it
// could. The pods get the controller's default resources, so the figures are also checked
// against what the pod reserves. make bench-overhead runs it; VIRTPOD_BENCH_KERNEL_IMAGE names
// another kernel image (localhost/virtpod/guest-bzimage:dev: the same kernel as a bzImage).
func BenchmarkVMOverhead(b *testing.B) {
	for i := 0; i < b.N; i++ {
		ns := namespace(b)
		sizes := []string{"256Mi", "1Gi"}
		vms := make([]*vmv1.VirtualMachine, len(sizes))
		for j, size := range sizes {
			vms[j] = newVM(ns, "overhead-"+strings.ToLower(size))
			vms[j].Spec.PodResources = nil // the controller's defaults: what a user gets
			vms[j].Spec.Guest.Memory = resource.MustParse(size)
			if k := os.Getenv("VIRTPOD_BENCH_KERNEL_IMAGE"); k != "" {
				vms[j].Spec.Guest.KernelImage = k
			}
			mustCreate(b, vms[j])
		}
		var wg sync.WaitGroup
		for _, vm := range vms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				measureOverhead(b, vm)
			}()
		}
		wg.Wait()
	}
}

func measureOverhead(b *testing.B, vm *vmv1.VirtualMachine) {
	ctx := context.Background()
	podName := podspec.PodName(vm.Name)
	eventually(b, vm.Name+" guest ready", 4*time.Minute, func() error {
		if !strings.Contains(podLogs(vm.Namespace, podName), marker) {
			return fmt.Errorf("no %s yet", marker)
		}
		return nil
	})
	pod, err := kubeset.CoreV1().Pods(vm.Namespace).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		b.Error(err)
		return
	}
	guest := vm.Spec.Guest.Memory.Value()
	res := pod.Spec.Containers[0].Resources
	b.Logf("%s: guest %d MiB; pod requests cpu %s memory %s, limits cpu %s memory %s", vm.Name, guest>>20,
		res.Requests.Cpu(), res.Requests.Memory(), res.Limits.Cpu(), res.Limits.Memory())
	// Let the guest's boot-time work (module loads, httpd, acpid) settle before calling it idle.
	time.Sleep(10 * time.Second)
	memDir, err := podCgroup("memory", pod.UID)
	if err != nil {
		b.Error(err)
		return
	}
	cpuDir, err := podCgroup("cpuacct", pod.UID)
	if err != nil {
		b.Error(err)
		return
	}
	cpu0, _ := cgroupCPU(cpuDir)
	time.Sleep(10 * time.Second)
	cpu1, _ := cgroupCPU(cpuDir)
	b.Logf("%s idle CPU: %.1f millicores over 10 s", vm.Name, float64(cpu1-cpu0)/float64(10*time.Second)*1000)
	report := func(state string) {
		cg, err := readCgroupMem(memDir)
		if err != nil {
			b.Error(err)
			return
		}
		procs := podProcesses(pod.UID)
		q, errQ := readProcMem(findProcess(procs, "qemu-system"), guest)
		r, errR := readProcMem(findProcess(procs, "virtpod-runner"), 0)
		if errQ != nil || errR != nil {
			b.Errorf("%s: reading QEMU's and the runner's memory: %v %v", vm.Name, errQ, errR)
			return
		}
		b.Logf("%s %s: pod cgroup usage %.1f MiB (rss %.1f, cache %.1f), working set %.1f MiB of the %.0f MiB limit; "+
			"QEMU RSS %.1f MiB = guest RAM %.1f + TCG cache %.1f + QEMU's own %.1f (anonymous %.1f, file %.1f); runner RSS %.1f MiB (anonymous %.1f); "+
			"the pod beyond the guest's resident RAM: %.1f MiB (working set less guest RAM), of which TCG cache %.1f MiB, the rest (what KVM would cost) %.1f MiB",
			vm.Name, state, mib(cg.Usage), mib(cg.RSS), mib(cg.Cache), mib(cg.WorkingSet), mib(cg.Limit),
			mib(q.RSS), mib(q.GuestRAM), mib(q.TCGCache), mib(q.Own()), mib(q.OwnAnon), mib(q.OwnFile()), mib(r.RSS), mib(r.OwnAnon),
			mib(cg.WorkingSet-q.GuestRAM), mib(q.TCGCache), mib(cg.WorkingSet-q.GuestRAM-q.TCGCache))
		for _, m := range q.Top {
			b.Logf("%s %s: QEMU mapping %s: resident %.1f MiB, anonymous %.1f MiB", vm.Name, state, m.Name, mib(m.RSS), mib(m.Anon))
		}
		unit := strings.ToLower(vm.Spec.Guest.Memory.String())
		b.ReportMetric(mib(cg.WorkingSet), "MiB-ws-"+unit+"-"+state)
		b.ReportMetric(mib(cg.WorkingSet-q.GuestRAM), "MiB-beyond-guest-"+unit+"-"+state)
		b.ReportMetric(mib(cg.WorkingSet-q.GuestRAM-q.TCGCache), "MiB-beyond-guest-and-tcg-"+unit+"-"+state)
		b.ReportMetric(mib(q.TCGCache), "MiB-tcg-"+unit+"-"+state)
		if state == "touched" && cg.WorkingSet > cg.Limit {
			b.Errorf("%s: working set %.1f MiB is over the pod's limit %.1f MiB", vm.Name, mib(cg.WorkingSet), mib(cg.Limit))
		}
	}
	report("idle")
	runner := findProcess(podProcesses(pod.UID), "virtpod-runner")
	if err := touchGuestMemory(runner); err != nil {
		b.Errorf("%s: %v", vm.Name, err)
		return
	}
	time.Sleep(3 * time.Second)
	report("touched")
	got, err := kubeset.CoreV1().Pods(vm.Namespace).Get(ctx, podName, metav1.GetOptions{})
	if err == nil && len(got.Status.ContainerStatuses) > 0 && got.Status.ContainerStatuses[0].RestartCount > 0 {
		b.Errorf("%s: the runner restarted (%d) while the guest filled its memory: the pod's limit is too small", vm.Name, got.Status.ContainerStatuses[0].RestartCount)
	}
}

// touchGuestMemory types into the guest's console (the runner's console socket, reached through
// the runner's root from this node) a command that fills a tmpfs with all the memory the guest
// has available and frees it again: every guest page is then resident in QEMU.
func touchGuestMemory(runnerPID int) error {
	if runnerPID == 0 {
		return fmt.Errorf("no runner process found")
	}
	sock := fmt.Sprintf("/proc/%d/root%s/console.sock", runnerPID, runnerconfig.DefaultStateDir)
	c, err := net.Dial("unix", sock)
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	defer c.Close()
	// $((6*7)) makes the marker differ from the echoed command line.
	cmd := "B=/bin/busybox; total=$($B awk '/MemTotal/{print $2}' /proc/meminfo); " +
		"$B mount -o remount,size=${total}k /tmp; avail=$($B awk '/MemAvailable/{print $2}' /proc/meminfo); " +
		"$B dd if=/dev/zero of=/tmp/fill bs=1M count=$((avail/1024-16)) 2>/dev/null; $B rm -f /tmp/fill; echo TOUCHED-$((6*7))-DONE\n"
	if _, err := c.Write([]byte("\n" + cmd)); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Minute))
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "TOUCHED-42-DONE") {
			return nil
		}
	}
	return fmt.Errorf("the guest did not finish filling its memory: %v", sc.Err())
}
