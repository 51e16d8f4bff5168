package vm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// imageMapKey is the ConfigMap the package's controller is started with (--image-map). Until a
// test creates it, it does not exist, which maps nothing.
var imageMapKey = types.NamespacedName{Namespace: "virtpod-system", Name: "virtpod-image-map"}

func setImageMap(t *testing.T, text string) *corev1.ConfigMap {
	t.Helper()
	ctx := context.Background()
	_ = env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: imageMapKey.Namespace}})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: imageMapKey.Namespace, Name: imageMapKey.Name}}
	err := env.Client.Get(ctx, imageMapKey, cm)
	cm.Data = map[string]string{"images": text}
	if err == nil {
		err = env.Client.Update(ctx, cm)
	} else {
		err = env.Client.Create(ctx, cm)
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func deleteImageMap(t *testing.T) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: imageMapKey.Namespace, Name: imageMapKey.Name}}
	if err := env.Client.Delete(context.Background(), cm); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
}

func mapVM(ns, name string, policy vmv1.ImageUpdatePolicy) *vmv1.VirtualMachine {
	vm := kubeapi.SampleVM(ns, name)
	vm.Spec.RunnerImage = "localhost/imagemap/runner:v1"
	vm.Spec.Guest.KernelImage = "localhost/imagemap/kernel:v1"
	vm.Spec.Guest.RootDisk.Image = "localhost/imagemap/disk:v1"
	vm.Spec.ImageUpdatePolicy = policy
	return vm
}

func effective(t *testing.T, vm *vmv1.VirtualMachine, want vmv1.Images) {
	t.Helper()
	eventually(t, fmt.Sprintf("effective images %+v", want), func() error {
		got := getVM(t, vm)
		if got.Status.Images == nil || *got.Status.Images != want {
			return fmt.Errorf("status.images %+v", got.Status.Images)
		}
		return nil
	})
}

// TestImageMapBadLines: every bad line becomes a Warning event on the ConfigMap naming its line;
// the good lines apply.
func TestImageMapBadLines(t *testing.T) {
	defer deleteImageMap(t)
	ns := namespace(t)
	vm := create(t, mapVM(ns, "mapped", vmv1.ImageUpdateOnRestart))
	bad := []string{
		"justone",                           // 2
		"a b c",                             // 3
		"Upper/Case:1 localhost/x:1",        // 4
		"localhost/x:1 not a ref",           // 5 (three fields)
		"localhost/y:1 https://r/y:1",       // 6
		"localhost/z localhost/z2",          // 7 TO without a tag
		"localhost/self:1 localhost/self:1", // 8
		"localhost/imagemap/kernel:v1 localhost/imagemap/kernel:v3", // 9 duplicate of line 1
		"localhost/p:1 localhost/q:1",                               // 10 cycle
		"localhost/q:1 localhost/p:1",                               // 11 cycle
		"localhost/w:1 localhost/w:1:1",                             // 12
	}
	text := "localhost/imagemap/kernel:v1 localhost/imagemap/kernel:v2\n" + strings.Join(bad, "\n") +
		"\nlocalhost/imagemap/runner localhost/imagemap/runner:dev # any tag of the runner\n"
	cm := setImageMap(t, text)
	effective(t, vm, vmv1.Images{Runner: "localhost/imagemap/runner:dev", Kernel: "localhost/imagemap/kernel:v2", RootDisk: "localhost/imagemap/disk:v1"})
	eventually(t, "a Warning event naming the bad lines", func() error {
		list := &eventsv1.EventList{}
		if err := env.Client.List(context.Background(), list, client.InNamespace(cm.Namespace)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name != cm.Name || e.Type != corev1.EventTypeWarning || e.Reason != "ImageMapLinesIgnored" {
				continue
			}
			if !strings.HasPrefix(e.Note, fmt.Sprintf("%d line(s) of key \"images\" ignored", len(bad))) || len(e.Note) > 1024 {
				return fmt.Errorf("note %q", e.Note)
			}
			for _, want := range []string{"line 2: want two image references", "line 4: FROM \"Upper/Case:1\" is not an image reference",
				"line 8: maps an image to itself", "line 9: FROM \"localhost/imagemap/kernel:v1\" is already mapped on line 1", "line 10: part of a cycle"} {
				if !strings.Contains(e.Note, want) {
					return fmt.Errorf("note %q lacks %q", e.Note, want)
				}
			}
			return nil
		}
		return fmt.Errorf("no ImageMapLinesIgnored event among %d", len(list.Items))
	})
}

// TestImageMapLiveReload: a map change reaches every VM's status; only the VM that opted in to
// Recreate gets a new pod on the new images; the other keeps running and says a restart is
// needed. Deleting the map undoes it; re-creating it applies it again.
func TestImageMapLiveReload(t *testing.T) {
	defer deleteImageMap(t)
	// The VMs name their runner image, which their class must allow, as an admin would.
	defer editClass(t, "qemu", func(s *vmv1.ProviderClassSpec) { s.AllowedRunnerImages = []string{"localhost/imagemap/runner"} })()
	ctx := context.Background()
	ns := namespace(t)
	live := create(t, mapVM(ns, "live", vmv1.ImageUpdateRecreate))
	steady := create(t, mapVM(ns, "steady", vmv1.ImageUpdateOnRestart))
	v1 := vmv1.Images{Runner: "localhost/imagemap/runner:v1", Kernel: "localhost/imagemap/kernel:v1", RootDisk: "localhost/imagemap/disk:v1"}
	v2 := v1
	v2.Runner = "localhost/imagemap/runner:v2"
	pods := map[string]*corev1.Pod{}
	for _, vm := range []*vmv1.VirtualMachine{live, steady} {
		p := waitPod(t, vm, "")
		bind(t, p, "node-a")
		kubelet(t, p, running)
		condition(t, vm, vmv1.PhaseRunning, vmv1.ConditionImagesCurrent, metav1.ConditionTrue, "Current")
		effective(t, vm, v1)
		pods[vm.Name] = p
	}

	setImageMap(t, "localhost/imagemap/runner localhost/imagemap/runner:v2\n")
	effective(t, steady, v2)
	effective(t, live, v2)
	condition(t, steady, vmv1.PhaseRunning, vmv1.ConditionImagesCurrent, metav1.ConditionFalse, "RestartRequired")

	// The opted-in VM's pod is deleted; the kubelet would stop the guest and remove it.
	finishDelete(t, pods["live"])
	next := waitPod(t, live, pods["live"].UID)
	if got := podspec.PodImages(next); got != v2 {
		t.Fatalf("recreated pod runs %+v, want %+v", got, v2)
	}
	waitEvent(t, live, "Normal ImagesChanged: Recreating runner pod live-runner (imageUpdatePolicy Recreate): runner localhost/imagemap/runner:v1 → localhost/imagemap/runner:v2")
	if p, err := runnerPod(steady); err != nil || p.UID != pods["steady"].UID || p.DeletionTimestamp != nil {
		t.Fatalf("the VM that did not opt in lost its pod: %v", err)
	}
	if got := getVM(t, live); got.Status.RestartCount != 0 {
		t.Fatalf("a planned image roll counted as a restart: %d", got.Status.RestartCount)
	}
	bind(t, next, "node-a")
	kubelet(t, next, running)
	condition(t, live, vmv1.PhaseRunning, vmv1.ConditionImagesCurrent, metav1.ConditionTrue, "Current")

	// No map: the spec's images again, everywhere.
	deleteImageMap(t)
	effective(t, steady, v1)
	condition(t, steady, vmv1.PhaseRunning, vmv1.ConditionImagesCurrent, metav1.ConditionTrue, "Current")
	effective(t, live, v1)
	finishDelete(t, next)
	back := waitPod(t, live, next.UID)
	if got := podspec.PodImages(back); got != v1 {
		t.Fatalf("after the map was deleted the pod runs %+v, want %+v", got, v1)
	}

	// The map comes back: it applies again.
	setImageMap(t, "localhost/imagemap/runner localhost/imagemap/runner:v2\n")
	effective(t, steady, v2)
	_ = ctx
}

// finishDelete waits for the controller to delete the pod, then removes it as the kubelet does
// once the guest has stopped (there is no kubelet here).
func finishDelete(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	eventually(t, "the controller deletes pod "+pod.Name, func() error {
		p, err := runnerPod(&vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Labels[podspec.LabelVMName]}})
		if err != nil {
			return nil // gone already
		}
		if p.UID != pod.UID {
			return nil
		}
		if p.DeletionTimestamp == nil {
			return fmt.Errorf("pod %s not being deleted", pod.Name)
		}
		return env.Client.Delete(context.Background(), p, client.GracePeriodSeconds(0), client.Preconditions{UID: &p.UID})
	})
}

var _ = meta.FindStatusCondition
