package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestDevLoopRollsVM is the Tilt loop's two speeds. The fast one, live_update: files synced
// into the running VM's virtio-fs share and a ConfigMap update reach the guest without a
// restart (checkShares). The slow one, a rebuild, with the Tiltfile's own script: the runner
// image appears in the cluster's containerd under a new tag, the tag goes into the image-map
// ConfigMap, and the VM that opted in (imageUpdatePolicy: Recreate) rolls onto it and boots.
func TestDevLoopRollsVM(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	vm := newVM(ns, "roll")
	vm.Spec.ImageUpdatePolicy = vmv1.ImageUpdateRecreate
	// The Tilt loop's images carry their build tags, not a release's digests (config/local);
	// this one has virtiofsd.
	withShares(t, vm)
	if err := kube.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = run("-n", "virtpod-system", "delete", "configmap", "virtpod-image-map", "--ignore-not-found")
	})
	waitRunning(t, ns, "roll", 0)
	eventually(t, "the guest's marker", time.Minute, func() error { return contains(podLogs(ns, podspec.PodName("roll")), marker) })
	checkShares(t, ns, "roll")
	old, err := kubeset.CoreV1().Pods(ns).Get(ctx, podspec.PodName("roll"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	tag := fmt.Sprintf("tilt-e2e-%d", time.Now().Unix())
	want := "localhost/virtpod/runner:" + tag
	script := exec.Command("bash", kubeapi.Root()+"/tools/dev/devloop/retag.sh", devRunner, want)
	script.Env = os.Environ()
	if out, err := script.CombinedOutput(); err != nil {
		t.Fatalf("retag.sh: %v\n%s", err, out)
	}

	eventually(t, "the VM's pod recreated on "+want, 3*time.Minute, func() error {
		p := &corev1.Pod{}
		if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: podspec.PodName("roll")}, p); err != nil {
			return err
		}
		if p.UID == old.UID {
			return fmt.Errorf("still the old pod")
		}
		if got := podspec.PodImages(p).Runner; got != want {
			return fmt.Errorf("new pod runs %s", got)
		}
		return nil
	})
	got := waitRunning(t, ns, "roll", 0)
	if got.Status.Images == nil || got.Status.Images.Runner != want {
		t.Fatalf("status.images: %+v", got.Status.Images)
	}
	eventually(t, "the rolled guest boots", time.Minute, func() error {
		return contains(podLogs(ns, podspec.PodName("roll")), marker)
	})
	evs := &eventsv1.EventList{}
	if err := kube.List(ctx, evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, e := range evs.Items {
		if e.Reason == "ImagesChanged" && strings.Contains(e.Note, "runner "+devRunner+" → "+want) {
			return
		}
		notes = append(notes, e.Reason+": "+e.Note)
	}
	t.Fatalf("no ImagesChanged event naming the change: %q", notes)
}
