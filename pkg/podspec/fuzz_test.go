package podspec_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// FuzzRender builds VirtualMachines from fuzz inputs, keeps those the real API server admits
// (the CRD's OpenAPI and CEL validation decide; a refused input is skipped, never mended), and
// renders each one's runner pod. The pod must be deterministic, named <vm>-runner, never
// privileged, carry virtpod's labels over any the VM sets, hold each user string as one whole
// runner argument, and be accepted by the API server (a server-side dry-run create).
//
// The CRD passes some fields to the pod unchecked ("as in a Pod"): when the API server refuses
// the runner pod, the same user values are tried in a bare pod, and if that is refused too the
// CRD, not the builder, let them through (logged; see docs/security.md).
func FuzzRender(f *testing.F) {
	f.Add("web", "app=web", false, false, int32(2), "1Gi", "registry.example.com/vm/kernel:6.1", "registry.example.com/vm/debian:12",
		"", "", "", "", "", "", "", "", "", "", false)
	f.Add("demo", "app=web\nvm.virtpod.io/name=spoofed\napp.kubernetes.io/managed-by=me\nvm.virtpod.io/provider=x",
		false, true, int32(1), "256Mi", "localhost/virtpod/guest:dev", "localhost/virtpod/guest:dev", "10Gi", "localhost/virtpod/runner:dev",
		"console=ttyS0 --name=evil --network=none --port=x:1/TCP", "22/TCP ssh\n53/UDP dns\n80 http", "", "", "", "", "0", "bootstrap-data||", true)
	f.Add("ch-1", "", true, false, int32(4), "65537Ki", "kernel@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"disk", "64Mi", "", "", "", "pool=vms\nkubernetes.io/arch=amd64",
		"dedicated|Equal|vms|NoSchedule|\nmaint||||\n|Exists||NoExecute|300",
		`{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"zone","operator":"In","values":["a"]}]},{"matchFields":[{"key":"metadata.name","operator":"In","values":["n1"]}]},{}]}}}`,
		`{"requests":{"cpu":"3","memory":"1Gi"},"limits":{"memory":"2Gi"}}`, "3600", "boot.v1|user-data|network.config", false)
	f.Add("bad-cpus", "", false, false, int32(0), "1Gi", "k", "d", "", "", "", "", "", "", "", "", "", "", false)
	f.Add("gap", "", false, true, int32(1), "64Mi", "k", "d", "", "", "", "1/UDP a--b", "Bad Key!=v", "", "", "", "", "", false)

	c := fuzzServer(f)
	f.Fuzz(func(t *testing.T, name, labels string, cloudHypervisor, emulated bool, cpus int32, memory, kernelImage, diskImage,
		diskSize, runnerImage, kernelArgs, ports, nodeSelector, tolerations, affinity, podResources, grace, cloudInit string, copyImages bool) {
		in := vmInput{name: name, labels: labels, cloudHypervisor: cloudHypervisor, emulated: emulated, cpus: cpus, memory: memory,
			kernelImage: kernelImage, diskImage: diskImage, diskSize: diskSize, runnerImage: runnerImage, kernelArgs: kernelArgs,
			ports: ports, nodeSelector: nodeSelector, tolerations: tolerations, affinity: affinity, podResources: podResources, grace: grace,
			cloudInit: cloudInit}
		vm, ok := in.decode()
		if !ok {
			return // not a VirtualMachine in this test's encoding
		}
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		// The server answers with the VM as the controller would read it: defaults and UID set.
		if err := c.Create(ctx, vm, client.DryRunAll); err != nil {
			if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
				t.Logf("the CRD refuses it: %v", err)
				return
			}
			t.Fatalf("dry-run create of the VM: %v", err)
		}

		opts := podspec.DefaultOptions()
		opts.CopyImages = copyImages
		opts.Class = fuzzClass
		if !fuzzClass.Spec.AllowsRunnerImage(vm.Spec.RunnerImage) {
			t.Logf("the runner-image policy and the controller refuse runner image %q", vm.Spec.RunnerImage)
			return
		}
		pod := podspec.Build(vm, opts)
		if again := podspec.Build(vm.DeepCopy(), opts); !equality.Semantic.DeepEqual(pod, again) {
			t.Fatal("Build gave two different pods for the same VM")
		}
		checkPod(t, vm, pod)
		checkRunnerIsTheAdmins(t, pod, opts)

		sent := pod.DeepCopy()
		err := c.Create(ctx, sent, client.DryRunAll)
		if err == nil {
			if got, want := runnerOf(sent).Args, runnerOf(pod).Args; !slices.Equal(got, want) {
				t.Fatalf("the API server changed the runner's arguments:\n got %q\nwant %q", got, want)
			}
			return
		}
		if !apierrors.IsInvalid(err) {
			t.Fatalf("dry-run create of the pod: %v", err)
		}
		if perr := c.Create(ctx, bareProbe(vm), client.DryRunAll); perr != nil && apierrors.IsInvalid(perr) {
			t.Logf("CRD gap: the VM is admitted, but its pod fields are refused even in a bare pod: %v", perr)
			return
		}
		t.Fatalf("the API server refuses the runner pod of an admitted VM: %v", err)
	})
}

// bareProbe is a pod with only the VM's own pod-shaped values, as the user wrote them.
func bareProbe(vm *vmv1.VirtualMachine) *corev1.Pod {
	ctr := corev1.Container{Name: "probe", Image: "probe"}
	if r := vm.Spec.PodResources; r != nil {
		ctr.Resources = *r.DeepCopy()
	}
	for _, p := range vm.Spec.Guest.Ports {
		ctr.Ports = append(ctr.Ports, corev1.ContainerPort{Name: p.Name, ContainerPort: p.Port, Protocol: p.Protocol})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: "probe", Labels: vm.Labels},
		Spec: corev1.PodSpec{
			Containers:   []corev1.Container{ctr},
			NodeSelector: vm.Spec.NodeSelector,
			Tolerations:  vm.Spec.Tolerations,
			Affinity:     vm.Spec.Affinity.DeepCopy(),
		},
	}
}

func runnerOf(pod *corev1.Pod) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == vmv1.RunnerContainer {
			return &pod.Spec.Containers[i]
		}
	}
	return &corev1.Container{}
}

// hasPrefixCount counts the arguments that start with prefix.
func hasPrefixCount(args []string, prefix string) int {
	n := 0
	for _, a := range args {
		if strings.HasPrefix(a, prefix) {
			n++
		}
	}
	return n
}
