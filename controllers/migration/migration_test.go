package migration_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// TestMigrationSucceeds plays one migration through: the target pod as specified, the stream
// started from the receiver's address, the switch of the VM to the target, the source deleted,
// the figures in status and metrics.
func TestMigrationSucceeds(t *testing.T) {
	ns := namespace(t)
	n1, n2 := node(t, "a"), node(t, "b")
	vm, source := runningVM(t, ns, "web", n1, func(v *vmv1.VirtualMachine) { v.Labels = map[string]string{"app": "web"} })
	if c := meta.FindStatusCondition(vm.Status.Conditions, vmv1.ConditionMigratable); c.Status != metav1.ConditionTrue {
		t.Fatalf("Migratable %+v, want True", c)
	}
	succeeded := counter(t, "virtpod_migrations_total", map[string]string{"result": vmv1.ReasonSucceeded})
	downtimes := counter(t, "virtpod_migration_downtime_seconds", nil)

	mig := migrate(t, vm, "move", func(m *vmv1.VirtualMachineMigration) { m.Spec.BandwidthMiBps = 64 })
	tgt := target(t, mig)
	mig = getMig(t, mig)
	if !metav1.IsControlledBy(tgt, vm) || tgt.Labels[vmv1.LabelMigrationRole] != vmv1.MigrationRoleTarget || tgt.Labels["app"] != "web" ||
		tgt.Annotations[vmv1.AnnotationMigration] != string(mig.UID) {
		t.Fatalf("target pod metadata: labels %v annotations %v owners %v", tgt.Labels, tgt.Annotations, tgt.OwnerReferences)
	}
	args := tgt.Spec.Containers[0].Args
	if !slices.Contains(args, podspec.IncomingFlag) || !slices.Contains(args, "--network=masquerade") || tgt.Spec.Containers[0].Image != source.Spec.Containers[0].Image {
		t.Fatalf("target runner: image %s args %v", tgt.Spec.Containers[0].Image, args)
	}
	fields := tgt.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields
	if len(fields) != 1 || fields[0].Operator != corev1.NodeSelectorOpNotIn || fields[0].Values[0] != n1 {
		t.Fatalf("target affinity fields %+v, want metadata.name NotIn [%s]", fields, n1)
	}
	src, _ := getPod(ns, source.Name)
	if src.Annotations[vmv1.AnnotationMigration] != string(mig.UID) || mig.Status.Phase != vmv1.MigrationScheduling ||
		mig.Status.SourcePod != source.Name || mig.Status.SourceNode != n1 || mig.Status.StartTime == nil {
		t.Fatalf("source annotations %v, migration status %+v", src.Annotations, mig.Status)
	}

	env.Bind(t, tgt, n2)
	env.Kubelet(t, tgt, waiting("10.244.1.9"))
	sending(t, source, tgt)
	if p, _ := getPod(ns, source.Name); p.Annotations[vmv1.AnnotationMigrationBandwidth] != "64" {
		t.Errorf("bandwidth annotation %q, want the spec's 64", p.Annotations[vmv1.AnnotationMigrationBandwidth])
	}
	state(t, source, controlapi.MigrationActive, 100<<20, 300<<20, 0, "")
	eventually(t, "progress in status", func() error {
		if st := getMig(t, mig).Status; st.Phase != vmv1.MigrationRunning || st.TransferredBytes != 100<<20 || st.TargetNode != n2 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	state(t, source, controlapi.MigrationCompleted, 300<<20, 300<<20, 42, "")
	env.Kubelet(t, tgt, started("10.244.1.9"))

	got := ended(t, mig, vmv1.MigrationSucceeded, vmv1.ReasonSucceeded)
	// Ended and cleaned up, it holds nothing: no finalizer to wait for at a delete or uninstall.
	eventually(t, "the ended migration's finalizer dropped", func() error {
		if f := getMig(t, mig).Finalizers; len(f) > 0 {
			return fmt.Errorf("finalizers %v", f)
		}
		return nil
	})
	if got.Status.TargetNode != n2 || got.Status.DowntimeMs != 42 || got.Status.TotalBytes != 300<<20 || got.Status.CompletionTime == nil {
		t.Errorf("final status %+v", got.Status)
	}
	v := getVM(t, vm)
	if v.Status.PodName != tgt.Name || v.Status.PodUID != string(tgt.UID) || v.Status.Node != n2 || v.Status.PodIP != "10.244.1.9" {
		t.Errorf("VM status %+v, want the target pod %s on %s", v.Status, tgt.Name, n2)
	}
	gone(t, ns, source.Name)
	after := unmarked(t, tgt)
	if _, ok := after.Labels[vmv1.LabelMigrationRole]; ok || after.Labels["app"] != "web" {
		t.Errorf("target labels after the switch: %v", after.Labels)
	}
	// The VM controller now runs the target: still Running, Migratable named on the new pod.
	eventually(t, "VM follows the target", func() error {
		v := getVM(t, vm)
		c := meta.FindStatusCondition(v.Status.Conditions, vmv1.ConditionMigratable)
		if v.Status.Phase != vmv1.PhaseRunning || c == nil || !strings.Contains(c.Message, tgt.Name) {
			return fmt.Errorf("status %+v", v.Status)
		}
		return nil
	})
	if d := counter(t, "virtpod_migrations_total", map[string]string{"result": vmv1.ReasonSucceeded}) - succeeded; d != 1 {
		t.Errorf("virtpod_migrations_total{result=Succeeded} grew by %v, want 1", d)
	}
	if d := counter(t, "virtpod_migration_downtime_seconds", nil) - downtimes; d != 1 {
		t.Errorf("downtime observations grew by %v, want 1", d)
	}

	// A restart now acts on the target pod: its end brings a new <vm>-runner. (The source's
	// kubelet finishes its deletion first, as a real one does once the runner exited.)
	if err := env.Client.Delete(context.Background(), source, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	env.Kubelet(t, tgt, failedPod)
	eventually(t, "restart after the moved guest's crash", func() error {
		if v := getVM(t, vm); v.Status.RestartCount != 1 {
			return fmt.Errorf("status %+v", v.Status)
		}
		return nil
	})
	// ... in a new pod under the VM's own runner name, which the VM's status then names.
	eventually(t, "the restarted guest's pod "+podspec.PodName(vm.Name), func() error {
		p := &corev1.Pod{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: vm.Namespace, Name: podspec.PodName(vm.Name)}, p); err != nil {
			return err
		}
		if v := getVM(t, vm); v.Status.PodName != p.Name || v.Status.PodUID != string(p.UID) {
			return fmt.Errorf("status names %s (%s), the new pod is %s (%s)", v.Status.PodName, v.Status.PodUID, p.Name, p.UID)
		}
		return nil
	})
}

// TestMigrationFailures: each way a migration can fail ends it Failed with its reason, the
// target pod deleted and the source unmarked (the guest stays there), or as the VM's run says.
func TestMigrationFailures(t *testing.T) {
	cases := []struct {
		name   string
		vm     func(*vmv1.VirtualMachine)
		mig    func(*vmv1.VirtualMachineMigration)
		inject func(t *testing.T, vm *vmv1.VirtualMachine, mig *vmv1.VirtualMachineMigration, source, tgt *corev1.Pod, n2 string)
		reason string
		words  string
		// the target pod is made; the source is kept (unmarked) after
		target, keepSource bool
	}{
		{name: "target unschedulable", reason: vmv1.ReasonTargetUnschedulable, words: "0/2 nodes are available", target: true, keepSource: true,
			inject: func(t *testing.T, _ *vmv1.VirtualMachine, _ *vmv1.VirtualMachineMigration, _, tgt *corev1.Pod, _ string) {
				env.Kubelet(t, tgt, func(s *corev1.PodStatus) {
					s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
						Message: "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity"}}
				})
			}},
		{name: "target failed", reason: vmv1.ReasonTargetFailed, words: "connection reset", target: true, keepSource: true,
			inject: func(t *testing.T, _ *vmv1.VirtualMachine, _ *vmv1.VirtualMachineMigration, source, tgt *corev1.Pod, n2 string) {
				env.Bind(t, tgt, n2)
				env.Kubelet(t, tgt, waiting("10.244.1.9"))
				sending(t, source, tgt)
				env.Kubelet(t, tgt, failedPod)
			}},
		{name: "source deleted", reason: vmv1.ReasonSourceFailed, words: "deleted", target: true,
			inject: func(t *testing.T, _ *vmv1.VirtualMachine, _ *vmv1.VirtualMachineMigration, source, _ *corev1.Pod, _ string) {
				if err := env.Client.Delete(context.Background(), source, client.GracePeriodSeconds(0)); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "stream broken", reason: vmv1.ReasonStreamBroken, words: "Unable to write to socket: Broken pipe", target: true, keepSource: true,
			inject: func(t *testing.T, _ *vmv1.VirtualMachine, _ *vmv1.VirtualMachineMigration, source, tgt *corev1.Pod, n2 string) {
				env.Bind(t, tgt, n2)
				env.Kubelet(t, tgt, waiting("10.244.1.9"))
				sending(t, source, tgt)
				state(t, source, controlapi.MigrationActive, 1<<20, 300<<20, 0, "")
				state(t, source, controlapi.MigrationFailed, 2<<20, 300<<20, 0, "Unable to write to socket: Broken pipe")
			}},
		{name: "timeout", reason: vmv1.ReasonTimeout, words: "completionTimeoutSeconds (30s)", target: true, keepSource: true,
			mig: func(m *vmv1.VirtualMachineMigration) { m.Spec.CompletionTimeoutSeconds = 30 },
			inject: func(t *testing.T, _ *vmv1.VirtualMachine, _ *vmv1.VirtualMachineMigration, source, tgt *corev1.Pod, n2 string) {
				env.Bind(t, tgt, n2)
				env.Kubelet(t, tgt, waiting("10.244.1.9"))
				sending(t, source, tgt)
				clock.Advance(31 * 1e9)
				state(t, source, controlapi.MigrationActive, 1<<20, 300<<20, 0, "") // the agent's next report wakes the controller
			}},
		{name: "VM deleted", reason: vmv1.ReasonVMDeleted, words: "was deleted", target: true,
			inject: func(t *testing.T, vm *vmv1.VirtualMachine, _ *vmv1.VirtualMachineMigration, _, _ *corev1.Pod, _ string) {
				if err := env.Client.Delete(context.Background(), vm); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "not migratable", reason: vmv1.ReasonNotMigratable, words: "spec.guest.networkMode is Pod", keepSource: true,
			vm: func(v *vmv1.VirtualMachine) { v.Spec.Guest.NetworkMode = "" }},
		{name: "read-only disk on a ReadWriteOnce claim", reason: vmv1.ReasonNotMigratable, words: "spec.guest.disks[0] (data) is on claim data-1, which one node at a time can attach", keepSource: true,
			vm: func(v *vmv1.VirtualMachine) {
				v.Spec.Guest.Disks = []vmv1.Disk{{Name: "data", PersistentVolumeClaim: &vmv1.ClaimDiskSource{ClaimName: "data-1", ReadOnly: true}}}
			}},
		{name: "no such VM", reason: vmv1.ReasonVMNotFound, words: "no VirtualMachine nothing",
			mig: func(m *vmv1.VirtualMachineMigration) { m.Spec.VMName = "nothing" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace(t)
			n1, n2 := node(t, "a"), node(t, "b")
			if tc.name == "read-only disk on a ReadWriteOnce claim" {
				claim(t, ns, "data-1")
			}
			vm, source := runningVM(t, ns, "web", n1, tc.vm)
			failures := counter(t, "virtpod_migrations_total", map[string]string{"result": tc.reason})
			mig := migrate(t, vm, "move", tc.mig)
			var tgt *corev1.Pod
			if tc.target {
				tgt = target(t, mig)
			}
			if tc.inject != nil {
				tc.inject(t, vm, getMig(t, mig), source, tgt, n2)
			}
			got := ended(t, mig, vmv1.MigrationFailed, tc.reason)
			if c := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionCompleted); !strings.Contains(c.Message, tc.words) || c.Status != metav1.ConditionFalse {
				t.Errorf("Completed %+v, want False with %q", c, tc.words)
			}
			if got.Status.CompletionTime == nil {
				t.Error("no completionTime")
			}
			name := podspec.TargetPodName(mig.Spec.VMName, got.UID)
			if tc.target {
				gone(t, ns, name)
			} else if _, err := getPod(ns, name); !apierrors.IsNotFound(err) {
				t.Errorf("a target pod was made for a refused migration (%v)", err)
			}
			if tc.keepSource {
				if p := unmarked(t, source); p.DeletionTimestamp != nil || p.Annotations[vmv1.AnnotationMigrationResume] != "" {
					t.Errorf("source pod after the failure: deleting %v, annotations %v", p.DeletionTimestamp, p.Annotations)
				}
			}
			if d := counter(t, "virtpod_migrations_total", map[string]string{"result": tc.reason}) - failures; d != 1 {
				t.Errorf("virtpod_migrations_total{result=%s} grew by %v, want 1", tc.reason, d)
			}
		})
	}
}

func claim(t *testing.T, ns, name string) {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *ptr.To(resourceQ("1Gi"))}},
	}}
	if err := env.Client.Create(context.Background(), pvc); err != nil {
		t.Fatal(err)
	}
	pvc.Status.Phase = corev1.ClaimBound
	if err := env.Client.Status().Update(context.Background(), pvc); err != nil {
		t.Fatal(err)
	}
}
