package migration_test

import (
	"context"
	"fmt"
	"testing"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// TestImageUpdateLiveMigrates: a running guest whose VM says imageUpdatePolicy LiveMigrate,
// given a new runner image, is moved onto it by a migration the VM controller makes (named by
// the VM and the image, labelled, announced): its target pod runs the new runner on the
// source's kernel and disk images. A VM that keeps OnRestart gets no migration.
func TestImageUpdateLiveMigrates(t *testing.T) {
	ctx := context.Background()
	const repo, next = "registry.example.com/virtpod/runner", "registry.example.com/virtpod/runner:v2"
	class := &vmv1.ProviderClass{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "qemu"}, class); err != nil {
		t.Fatal(err)
	}
	before := class.DeepCopy()
	class.Spec.AllowedRunnerImages = append(class.Spec.AllowedRunnerImages, repo)
	if err := env.Client.Patch(ctx, class, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t)
	n1 := node(t, "a")
	live, source := runningVM(t, ns, "live", n1, func(v *vmv1.VirtualMachine) { v.Spec.ImageUpdatePolicy = vmv1.ImageUpdateLiveMigrate })
	kept, _ := runningVM(t, ns, "kept", n1, nil)
	for _, vm := range []*vmv1.VirtualMachine{live, kept} {
		p := vm.DeepCopy()
		p.Spec.RunnerImage = next
		if err := env.Client.Patch(ctx, p, client.MergeFrom(vm)); err != nil {
			t.Fatal(err)
		}
	}
	mig := &vmv1.VirtualMachineMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vmv1.ImageUpdateMigrationName("live", next)}}
	eventually(t, "the update's migration "+mig.Name, func() error {
		return env.Client.Get(ctx, client.ObjectKeyFromObject(mig), mig)
	})
	if mig.Spec.VMName != "live" || mig.Labels[vmv1.LabelImageUpdate] != "live" {
		t.Errorf("update migration %+v", mig)
	}
	tgt := target(t, mig)
	have, had := podspec.PodImages(tgt), podspec.PodImages(source)
	if have.Runner != next || have.Kernel != had.Kernel || have.RootDisk != had.RootDisk {
		t.Errorf("target's images %+v, source's %+v: want runner %s on the source's kernel and disk", have, had, next)
	}
	eventually(t, "the LiveUpdate event", func() error { return hasEvent(ctx, ns, "live", "ImagesChanged", "LiveUpdate") })
	// OnRestart: the new runner waits for the next start; no migration is made for it.
	list := &vmv1.VirtualMachineMigrationList{}
	if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Errorf("%d migrations in the namespace, want the live VM's alone", len(list.Items))
	}
}

// hasEvent says an event with reason and action is recorded on VM name.
func hasEvent(ctx context.Context, ns, name, reason, action string) error {
	list := &eventsv1.EventList{}
	if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason && e.Action == action {
			return nil
		}
	}
	return fmt.Errorf("no %s/%s event on %s among %d", reason, action, name, len(list.Items))
}
