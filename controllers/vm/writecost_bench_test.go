package vm_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/statuspatch"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// BenchmarkWriteCost measures what each write a VM costs the API server, one kind of write at a
// time with nothing else running (no controller, so no watch fan-out but the API server's own):
// kube-apiserver and etcd CPU per write, over N writes (VIRTPOD_BENCH_VMS, default 1000) from 16
// goroutines. The writes are the ones a VM's creation makes: the user's create (with and without
// config/admission's policies, with and without the provider default they set), the default
// written by the controller instead, the controller's status patch, the runner pod and the
// CreatedPod event, shaped as the controller makes them, and for comparison the status patch
// without its conditions and the event in JSON. Run with `make bench-write-cost`.
func BenchmarkWriteCost(b *testing.B) {
	n := 1000
	if s := os.Getenv("VIRTPOD_BENCH_VMS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for range b.N {
		writeCost(b, n)
	}
}

func writeCost(b *testing.B, n int) {
	ctx := context.Background()
	apiPid, etcdPid, err := env.Pids()
	if err != nil {
		b.Fatal(err)
	}
	ns := func() string {
		o := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cost-"}}
		if err := env.Client.Create(ctx, o); err != nil {
			b.Fatal(err)
		}
		return o.Name
	}
	type row struct {
		what           string
		api, etcd, all float64 // ms per write
	}
	var rows []row
	measure := func(what string, write func(i int) error) {
		time.Sleep(2 * time.Second) // let the last phase's trailing work end
		a0, e0 := cpuOf(b, apiPid), cpuOf(b, etcdPid)
		if p := os.Getenv("VIRTPOD_BENCH_PROFILE_WRITE"); p != "" && strings.Contains(what, p) {
			go profileAPIServer(b, os.Getenv("VIRTPOD_BENCH_APISERVER_PROFILE"), 3*time.Second)
		}
		kubeapi.Parallel(b, n, write)
		if b.Failed() {
			b.FailNow()
		}
		time.Sleep(2 * time.Second) // and count this phase's
		a, e := (cpuOf(b, apiPid)-a0)*1000/float64(n), (cpuOf(b, etcdPid)-e0)*1000/float64(n)
		rows = append(rows, row{what, a, e, a + e})
	}
	vms := func(ns string, provider vmv1.Provider) []*vmv1.VirtualMachine {
		out := make([]*vmv1.VirtualMachine, n)
		for i := range out {
			out[i] = kubeapi.SampleVM(ns, fmt.Sprintf("vm-%05d", i))
			out[i].Spec.Provider = provider
		}
		return out
	}

	// The default class as the controller marks it, for the mutating policy to read.
	qemu := &vmv1.ProviderClass{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "qemu"}, qemu); err != nil {
		b.Fatal(err)
	}
	if err := env.Client.Status().Patch(ctx, qemu, client.RawPatch(types.MergePatchType, []byte(`{"status":{"default":true,"readyNodes":0,"totalNodes":0}}`))); err != nil {
		b.Fatal(err)
	}

	bindings := unbindAll(b)
	bare := vms(ns(), "")
	measure("VM create, no admission policies", func(i int) error { return env.Client.Create(ctx, bare[i]) })
	measure("controller writes spec.provider (merge patch)", func(i int) error {
		return env.Client.Patch(ctx, bare[i], client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"resourceVersion":"`+bare[i].ResourceVersion+`"},"spec":{"provider":"qemu"}}`)))
	})
	rebind(b, bindings)
	named := vms(ns(), vmv1.ProviderQEMU)
	measure("VM create naming its provider, policies bound", func(i int) error { return env.Client.Create(ctx, named[i]) })
	admitted := vms(ns(), "")
	measure("VM create, provider set by the MutatingAdmissionPolicy", func(i int) error {
		if err := env.Client.Create(ctx, admitted[i]); err != nil {
			return err
		}
		if admitted[i].Spec.Provider != vmv1.ProviderQEMU {
			return fmt.Errorf("%s: spec.provider %q after admission", admitted[i].Name, admitted[i].Spec.Provider)
		}
		return nil
	})
	pods := make([]*corev1.Pod, n)
	measure("runner pod create", func(i int) error {
		pods[i] = podspec.Build(admitted[i], podspec.DefaultOptions())
		return env.Client.Create(ctx, pods[i])
	})
	measure("controller status patch (pod created)", func(i int) error {
		next := admitted[i].DeepCopy()
		scheduledStatus(next, pods[i])
		return statuspatch.Patch(ctx, env.Client, admitted[i], next)
	})
	measure("the same status as a PUT of /status (for comparison)", func(i int) error {
		next := named[i].DeepCopy()
		scheduledStatus(next, pods[i])
		return env.Client.Status().Update(ctx, next)
	})
	// What the first status's five conditions cost: the same patch without them on VMs of
	// their own (each condition also adds its entry to the status manager's managed fields).
	unconditioned := vms(ns(), vmv1.ProviderQEMU)
	kubeapi.Parallel(b, n, func(i int) error { return env.Client.Create(ctx, unconditioned[i]) })
	measure("the same status patch without its conditions", func(i int) error {
		next := unconditioned[i].DeepCopy()
		scheduledStatus(next, pods[i])
		next.Status.Conditions = nil
		return statuspatch.Patch(ctx, env.Client, unconditioned[i], next)
	})
	// controller-runtime's client posts built-in types in protobuf; client-go's typed clients,
	// the controller's event recorder among them, in JSON unless told otherwise.
	measure("CreatedPod event (events.k8s.io/v1)", func(i int) error {
		return env.Client.Create(ctx, createdPodEvent(admitted[i], pods[i]))
	})
	jsonEvents, err := eventsv1client.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	measure("the same event in JSON, as the recorder posts it", func(i int) error {
		_, err := jsonEvents.Events(admitted[i].Namespace).Create(ctx, createdPodEvent(admitted[i], pods[i]), metav1.CreateOptions{})
		return err
	})

	fmt.Printf("\nAPI-server and etcd CPU per write, %d writes of each kind from 16 goroutines, no controller running:\n", n)
	fmt.Printf("%-58s %12s %9s %9s\n", "write", "apiserver", "etcd", "total")
	for _, r := range rows {
		fmt.Printf("%-58s %9.2f ms %6.2f ms %6.2f ms\n", r.what, r.api, r.etcd, r.all)
		b.ReportMetric(r.all, "ms/"+metricName(r.what))
	}
}

// scheduledStatus is the status the controller writes once it made the runner pod, as it
// writes it (controllers/vm: Scheduled, Ready, ImagesCurrent, ProviderAvailable,
// SoftwareEmulation).
func scheduledStatus(vm *vmv1.VirtualMachine, pod *corev1.Pod) {
	now := metav1.Now()
	st := &vm.Status
	st.Phase, st.PodName, st.PodUID, st.ObservedGeneration = vmv1.PhaseScheduling, pod.Name, string(pod.UID), vm.Generation
	images := podspec.PodImages(pod)
	st.Images = &images
	for _, c := range []metav1.Condition{
		{Type: vmv1.ConditionScheduled, Status: metav1.ConditionFalse, Reason: "WaitingForScheduler", Message: "the runner pod waits for the scheduler"},
		{Type: vmv1.ConditionReady, Status: metav1.ConditionFalse, Reason: "WaitingForScheduler", Message: "the runner pod waits for the scheduler"},
		{Type: "ImagesCurrent", Status: metav1.ConditionTrue, Reason: "Current", Message: "the runner pod uses the effective images"},
		{Type: vmv1.ConditionProviderAvailable, Status: metav1.ConditionTrue, Reason: vmv1.ReasonProviderAvailable, Message: "ProviderClass qemu is enabled; no node agent has reported; is the virtpod-agent DaemonSet running?"},
		{Type: vmv1.ConditionSoftwareEmulation, Status: metav1.ConditionTrue, Reason: "EmulationRequested", Message: "the guest runs under software emulation (QEMU TCG), many times slower than with KVM, because the VM asked for it"},
	} {
		c.ObservedGeneration, c.LastTransitionTime = vm.Generation, now
		meta.SetStatusCondition(&st.Conditions, c)
	}
}

// createdPodEvent is the event the controller's recorder posts for a new runner pod.
func createdPodEvent(vm *vmv1.VirtualMachine, pod *corev1.Pod) *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: vm.Namespace, Name: vm.Name + "." + strconv.FormatInt(time.Now().UnixNano(), 16)},
		EventTime:           metav1.NewMicroTime(time.Now()),
		ReportingController: "virtpod-controller",
		ReportingInstance:   "virtpod-controller-bench",
		Action:              "CreatePod",
		Reason:              "CreatedPod",
		Regarding:           corev1.ObjectReference{APIVersion: vmv1.GroupVersion.String(), Kind: "VirtualMachine", Namespace: vm.Namespace, Name: vm.Name, UID: vm.UID, ResourceVersion: vm.ResourceVersion},
		Related:             &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Note:                fmt.Sprintf("Created runner pod %s (provider %s)", pod.Name, vm.Spec.Provider),
		Type:                corev1.EventTypeNormal,
	}
}

// unbindAll deletes config/admission's bindings (as on a cluster where they were never
// applied) and returns them for rebind.
func unbindAll(b *testing.B) []*unstructured.Unstructured {
	ctx := context.Background()
	var out []*unstructured.Unstructured
	for _, kind := range []string{"ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicyBinding"} {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind(kind + "List"))
		if err := env.Client.List(ctx, list); err != nil {
			b.Fatal(err)
		}
		for i := range list.Items {
			o := &list.Items[i]
			if err := env.Client.Delete(ctx, o); err != nil {
				b.Fatal(err)
			}
			out = append(out, o)
		}
	}
	// The API server drops them from its informers a moment later.
	waitFor(b, "the policies unbound", 30*time.Second, func() bool {
		vm := kubeapi.SampleVM("default", "probe")
		vm.Spec.RunnerImage = "evil.example.com/runner:v1"
		return env.Client.Create(ctx, vm, client.DryRunAll) == nil && vm.Spec.Provider == ""
	})
	return out
}

func rebind(b *testing.B, bindings []*unstructured.Unstructured) {
	ctx := context.Background()
	for _, o := range bindings {
		o.SetResourceVersion("")
		o.SetUID("")
		if err := env.Client.Create(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	waitFor(b, "the policies bound", 30*time.Second, func() bool {
		vm := kubeapi.SampleVM("default", "probe")
		return env.Client.Create(ctx, vm, client.DryRunAll) == nil && vm.Spec.Provider == vmv1.ProviderQEMU
	})
}

func metricName(what string) string {
	out := make([]rune, 0, len(what))
	for _, r := range what {
		switch {
		case r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9':
			out = append(out, r)
		case len(out) > 0 && out[len(out)-1] != '-':
			out = append(out, '-')
		}
	}
	return string(out)
}
