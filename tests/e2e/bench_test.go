package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// BenchmarkDebianApplyToCloudInitFinal measures, on the local cluster, the time from creating a
// VirtualMachine of the Debian cloud guest (no kernel image, UEFI, cloud-init from a Secret) to
// cloud-init's final message on its console, and the stages on the way: the VM Running (the
// guest runs), the runner's DHCP ACK. Emulated (TCG): the figures are this machine's, not KVM's.
// make bench-apply runs it.
func BenchmarkDebianApplyToCloudInitFinal(b *testing.B) {
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		ns := namespace(b)
		mustCreate(b, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "user-data"},
			Data: map[string][]byte{"value": []byte("#cloud-config\nfinal_message: \"virtpod-bench final after $UPTIME s\"\n")}})
		vm := debianVM(ns, "bench")
		vm.Spec.Guest.CloudInit = &vmv1.CloudInit{SecretRef: vmv1.SecretReference{Name: "user-data"}}
		start := time.Now()
		mustCreate(b, vm)
		var running, ack time.Duration
		eventually(b, "cloud-init's final message", debianBoot, func() error {
			if running == 0 {
				got := &vmv1.VirtualMachine{}
				if err := kube.Get(ctx, client.ObjectKeyFromObject(vm), got); err == nil && got.Status.Phase == vmv1.PhaseRunning {
					running = time.Since(start)
				}
			}
			logs := podLogs(ns, podspec.PodName(vm.Name))
			if ack == 0 && strings.Contains(logs, `"type":"ACK"`) {
				ack = time.Since(start)
			}
			if !strings.Contains(logs, "virtpod-bench final after") {
				return fmt.Errorf("no final message yet")
			}
			return nil
		})
		total := time.Since(start)
		b.ReportMetric(total.Seconds(), "s-apply-to-final")
		b.ReportMetric(running.Seconds(), "s-apply-to-running")
		b.ReportMetric(ack.Seconds(), "s-apply-to-dhcp-ack")
		b.Logf("apply -> Running %v -> DHCP ACK %v -> cloud-init final %v", running.Round(time.Second), ack.Round(time.Second), total.Round(time.Second))
		if err := kube.Delete(ctx, vm); err != nil {
			b.Fatal(err)
		}
	}
}
