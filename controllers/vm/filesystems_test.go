package vm_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestFilesystemSources: a VM with filesystems whose class's runner lacks virtio-fs (the QEMU
// 7.2 class's) gets no pod; once the class's runner has it (the default class's), what the filesystems name is checked as its disks' is: a missing
// ConfigMap holds it, naming the filesystem; a claim another VM writes holds it; once there,
// the runner pod mounts each source and tells the runner to share it.
func TestFilesystemSources(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	class := storageClass(t, "fs-wffc", storagev1.VolumeBindingWaitForFirstConsumer)
	claim(t, ns, "site", class, corev1.PersistentVolumeFilesystem)
	writer := create(t, diskVM(ns, "writer", claimDisk("data", "site", false)))
	bind(t, waitPod(t, writer, ""), "fs-node")

	restore := editClass(t, "qemu", func(s *vmv1.ProviderClassSpec) { s.RunnerFeatures = nil }) // as providerclass-qemu-7.2.yaml
	t.Cleanup(restore)
	vm := kubeapi.SampleVM(ns, "web")
	vm.Spec.Guest.Filesystems = []vmv1.Filesystem{
		{Name: "conf", ConfigMap: &vmv1.FilesystemConfigMap{Name: "web-conf"}},
		{Name: "site", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "site"}},
		{Name: "dev", EmptyDir: &vmv1.FilesystemEmptyDir{}},
	}
	create(t, vm)
	// The class's runner image (Debian 12's has no virtiofsd) lacks virtio-fs: refused before a
	// pod, in a condition and an event that say what to do.
	providerCond(t, vm, metav1.ConditionFalse, vmv1.ReasonRunnerLacksFeature,
		"spec.guest.filesystems needs a runner image with virtiofsd (runner feature VirtioFS); ProviderClass qemu's runner image lacks it (its spec.runnerFeatures: none): remove spec.guest.filesystems, name a runner image that has it in spec.runnerImage")
	waitEvent(t, vm, "Warning RunnerLacksFeature: No runner pod starts: spec.guest.filesystems needs a runner image with virtiofsd")
	noPod(t, vm)
	restore() // the default class: its runner has virtiofsd
	providerCond(t, vm, metav1.ConditionTrue, vmv1.ReasonProviderAvailable, "")
	held(t, vm, vmv1.ReasonClaimInUse, `PersistentVolumeClaim "site" is in use by VirtualMachine writer`)

	// The writer lets go of the claim: now the ConfigMap is what is missing.
	if err := env.Client.Delete(ctx, writer); err != nil {
		t.Fatal(err)
	}
	removePod(t, waitPod(t, writer, ""))
	held(t, vm, vmv1.ReasonConfigMapNotFound, `ConfigMap "web-conf" (filesystem conf) does not exist in namespace `+ns, "create it")
	if err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-conf"}, Data: map[string]string{"a": "b"}}); err != nil {
		t.Fatal(err)
	}
	condition(t, vm, vmv1.PhaseScheduling, vmv1.ConditionDisksReady, metav1.ConditionTrue, vmv1.ReasonDisksReady)
	pod := waitPod(t, vm, "")
	args := strings.Join(pod.Spec.Containers[0].Args, " ")
	for _, want := range []string{"--filesystem=tag=conf,path=/virtpod/fs/conf,readonly", "--filesystem=tag=site,path=/virtpod/fs/site", "--filesystem=tag=dev,path=/virtpod/fs/dev"} {
		if !strings.Contains(args, want) {
			t.Errorf("runner args lack %s: %s", want, args)
		}
	}
	if !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "fs-site" && v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "site"
	}) {
		t.Errorf("the pod does not mount claim site: %+v", pod.Spec.Volumes)
	}
}
