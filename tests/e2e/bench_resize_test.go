package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// BenchmarkClusterResize (make bench-resize-cluster): one running guest on the local cluster is
// resized by patches of its spec, memory up by a 128Mi block at a time (the first step also
// adds a CPU) and back down. Each step is timed from the patch to both status.guest having the
// new size and the guest's own console report showing it (50 ms polls); medians of the grows
// and the shrinks are reported. The guest is resized once booted (its init has reported).
func BenchmarkClusterResize(b *testing.B) {
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		ns := namespace(b)
		vm := newVM(ns, "rsbench")
		vm.Spec.PodResources = nil
		vm.Spec.Guest.MaxCPUs = ptr.To[int32](2)
		vm.Spec.Guest.MaxMemory = ptr.To(resource.MustParse("1Gi"))
		mustCreate(b, vm)
		eventually(b, "VM Running", 4*time.Minute, func() error {
			got := &vmv1.VirtualMachine{}
			if err := kube.Get(ctx, client.ObjectKeyFromObject(vm), got); err != nil {
				return err
			}
			if got.Status.Phase != vmv1.PhaseRunning || got.Status.Guest == nil {
				return fmt.Errorf("status %+v", got.Status)
			}
			// Steady state: the guest's init has run (its first size report and the marker).
			// A resize asked earlier, while the guest boots, is not what this measures.
			return contains(podLogs(ns, podspec.PodName(vm.Name)), "VIRTPOD-GUEST-SIZE cpus=1 online=0 ", marker)
		})
		var grow, shrink []float64
		for _, mib := range []int{384, 512, 640, 768, 640, 512, 384, 256} {
			body, _ := json.Marshal(map[string]any{"spec": map[string]any{"guest": map[string]any{"cpus": 2, "memory": fmt.Sprintf("%dMi", mib)}}})
			start := time.Now()
			if err := kube.Patch(ctx, &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vm.Name}},
				client.RawPatch(types.MergePatchType, body)); err != nil {
				b.Fatal(err)
			}
			want := resource.MustParse(fmt.Sprintf("%dMi", mib))
			eventually(b, fmt.Sprintf("status.guest and the guest at %dMi", mib), 2*time.Minute, func() error {
				got := &vmv1.VirtualMachine{}
				if err := kube.Get(ctx, client.ObjectKeyFromObject(vm), got); err != nil {
					return err
				}
				if g := got.Status.Guest; g == nil || g.CPUs != 2 || g.Memory.Cmp(want) != 0 {
					return fmt.Errorf("status.guest %+v", got.Status.Guest)
				}
				m := guestSizeLine.FindAllStringSubmatch(podLogs(ns, podspec.PodName(vm.Name)), -1)
				if len(m) == 0 {
					return fmt.Errorf("no VIRTPOD-GUEST-SIZE line yet")
				}
				if last := m[len(m)-1]; last[1] != "0-1" || last[2] != fmt.Sprint(mib) {
					return fmt.Errorf("the guest reports %s", last[0])
				}
				return nil
			})
			ms := float64(time.Since(start).Microseconds()) / 1000
			b.Logf("%dMi: %.0f ms", mib, ms)
			if len(grow) < 4 {
				grow = append(grow, ms)
			} else {
				shrink = append(shrink, ms)
			}
		}
		b.ReportMetric(median(grow), "grow-ms")
		b.ReportMetric(median(shrink), "shrink-ms")
		_ = kube.Delete(ctx, vm)
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
