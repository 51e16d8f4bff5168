package vm

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// Indexes of VMs by the claims and ConfigMaps their disks name, so a claim's or ConfigMap's
// event reaches exactly the VMs that name it.
const (
	indexClaims     = "spec.guest.claims"
	indexConfigMaps = "spec.guest.configMaps"
)

// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch

// diskFacts are what DisksReady is decided from.
type diskFacts struct {
	named   bool                     // the VM names claims, ConfigMaps or Secrets: DisksReady applies
	claims  map[string]podspec.Claim // what the runner pod needs of each claim
	held    *cause                   // why no runner pod may start for the disks; nil when one may
	summary string                   // DisksReady's message when nothing holds the VM
}

// checkDisks reads what the VM's disks name. Claims and ConfigMaps are read from the cache
// (ConfigMaps by metadata only); Secrets never: a missing Secret keeps the runner pod in
// ContainerCreating, and the kubelet's FailedMount event names it, as for cloud-init's Secret.
// RBAC cannot grant a Secret's metadata without its data, so a controller that may see whether
// a Secret exists may read every Secret it can see: virtpod does not ask for that.
func (r *Reconciler) checkDisks(ctx context.Context, vm *vmv1.VirtualMachine, pod *corev1.Pod) (diskFacts, error) {
	g := &vm.Spec.Guest
	f := diskFacts{claims: map[string]podspec.Claim{}}
	claimNames, configMaps, secrets := g.ClaimNames(), g.ConfigMapNames(), g.SecretNames()
	f.named = len(claimNames)+len(configMaps)+len(secrets) > 0
	if !f.named {
		return f, nil
	}
	var waiting []string
	for _, name := range claimNames {
		pvc := &corev1.PersistentVolumeClaim{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: vm.Namespace, Name: name}, pvc)
		if apierrors.IsNotFound(err) {
			f.held = &cause{vmv1.ReasonClaimNotFound, fmt.Sprintf("PersistentVolumeClaim %q (%s) does not exist in namespace %s: create it, or name another claim",
				name, claimUse(g, name), vm.Namespace)}
			return f, nil
		}
		if err != nil {
			return f, r.fail("get-claim", err)
		}
		if why, err := r.claimUsable(ctx, vm, pvc); err != nil || why != nil {
			f.held = why
			return f, err
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			waiting = append(waiting, name)
		}
		f.claims[name] = podspec.ClaimOf(pvc)
		if g.StateClaim != nil && g.StateClaim.ClaimName == name {
			if why := stateClaimUnfit(g, f.claims[name]); why != nil {
				f.held = why
				return f, nil
			}
		}
		if pod == nil {
			if why, err := r.claimTaken(ctx, vm, name); err != nil || why != nil {
				f.held = why
				return f, err
			}
		}
	}
	for _, name := range configMaps {
		cm := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}}
		err := r.ConfigMaps.Get(ctx, types.NamespacedName{Namespace: vm.Namespace, Name: name}, cm)
		if apierrors.IsNotFound(err) {
			f.held = &cause{vmv1.ReasonConfigMapNotFound, fmt.Sprintf("ConfigMap %q (%s) does not exist in namespace %s: create it, or name another ConfigMap",
				name, configMapDisk(g, name), vm.Namespace)}
			return f, nil
		}
		if err != nil {
			return f, r.fail("get-configmap", err)
		}
	}
	var parts []string
	if n := len(claimNames); n > 0 {
		s := fmt.Sprintf("claims %s ready", strings.Join(claimNames, ", "))
		if len(waiting) > 0 {
			s += fmt.Sprintf(" (%s bind when the runner pod is scheduled: WaitForFirstConsumer)", strings.Join(waiting, ", "))
		}
		parts = append(parts, s)
	}
	if len(configMaps) > 0 {
		parts = append(parts, "ConfigMaps "+strings.Join(configMaps, ", ")+" exist")
	}
	if len(secrets) > 0 {
		parts = append(parts, "Secrets "+strings.Join(secrets, ", ")+" are not read by virtpod: if one is missing, the runner pod's FailedMount event says so")
	}
	f.summary = strings.Join(parts, "; ")
	return f, nil
}

// claimUsable says why a claim cannot be used now; nil when it is bound or will be bound by the
// runner pod itself: with WaitForFirstConsumer a claim stays Pending until a pod that uses it is
// scheduled, so holding the VM for it would wait forever.
func (r *Reconciler) claimUsable(ctx context.Context, vm *vmv1.VirtualMachine, pvc *corev1.PersistentVolumeClaim) (*cause, error) {
	name := pvc.Name
	switch {
	case pvc.DeletionTimestamp != nil:
		return &cause{vmv1.ReasonClaimDeleting, fmt.Sprintf("PersistentVolumeClaim %q is being deleted: name another claim, or recreate it once it is gone", name)}, nil
	case pvc.Status.Phase == corev1.ClaimLost:
		return &cause{vmv1.ReasonClaimLost, fmt.Sprintf("PersistentVolumeClaim %q lost its volume %q (phase Lost): restore the PersistentVolume, or replace the claim", name, pvc.Spec.VolumeName)}, nil
	case pvc.Status.Phase == corev1.ClaimBound:
		return nil, nil
	}
	class := pvc.Spec.StorageClassName
	if class == nil || *class == "" {
		return &cause{vmv1.ReasonClaimPending, fmt.Sprintf("PersistentVolumeClaim %q is Pending and has no StorageClass: create a PersistentVolume it can bind to, or give it a StorageClass", name)}, nil
	}
	sc := &storagev1.StorageClass{}
	err := r.Client.Get(ctx, types.NamespacedName{Name: *class}, sc)
	if apierrors.IsNotFound(err) {
		return &cause{vmv1.ReasonClaimPending, fmt.Sprintf("PersistentVolumeClaim %q is Pending: its StorageClass %q does not exist; create it, or give the claim another class", name, *class)}, nil
	}
	if err != nil {
		return nil, r.fail("get-storageclass", err)
	}
	if sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer {
		return nil, nil
	}
	return &cause{vmv1.ReasonClaimPending, fmt.Sprintf("PersistentVolumeClaim %q is Pending: its StorageClass %q binds Immediately and has not provisioned a volume yet; see kubectl describe pvc %s", name, *class, name)}, nil
}

// claimTaken says which other VM keeps this one from starting on a claim, when either writes it:
// a VM whose runner pod exists holds it; otherwise the VM created first that wants to run. So two
// VMs that both wait agree on which goes first, whichever the controller looks at first.
func (r *Reconciler) claimTaken(ctx context.Context, vm *vmv1.VirtualMachine, claim string) (*cause, error) {
	// First the pods themselves: a runner pod still shutting down (its VM restarting, halted or
	// deleted) has a guest that may still write, whatever its VM's status says by now.
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(vm.Namespace), client.MatchingLabels{vmv1.LabelManagedBy: vmv1.ManagedBy}); err != nil {
		return nil, r.fail("list-claim-pods", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if ownedBy(p, vm) || podEnded(p) {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if c := v.PersistentVolumeClaim; c != nil && c.ClaimName == claim && (!c.ReadOnly || vm.Spec.Guest.WritesClaim(claim)) {
				if of := p.Labels[vmv1.LabelCopierOf]; of != "" {
					return &cause{vmv1.ReasonClaimInUse, fmt.Sprintf("PersistentVolumeClaim %q is being copied by %s (copier pod %s): the guest starts once the copy ends",
						claim, of, p.Name)}, nil
				}
				owner := p.Labels[podspec.LabelVMName]
				return &cause{vmv1.ReasonClaimInUse, fmt.Sprintf("PersistentVolumeClaim %q is in use by VirtualMachine %s (runner pod %s): two VMs never write one disk; stop %s (runStrategy: Halted) or give this VM another claim",
					claim, owner, p.Name, owner)}, nil
			}
		}
	}
	list := &vmv1.VirtualMachineList{}
	if err := r.Client.List(ctx, list, client.InNamespace(vm.Namespace), client.MatchingFields{indexClaims: claim}); err != nil {
		return nil, r.fail("list-claim-users", err)
	}
	others := list.Items
	sort.Slice(others, func(i, j int) bool { return firstCreated(&others[i], &others[j]) })
	writes := vm.Spec.Guest.WritesClaim(claim)
	for i := range others {
		o := &others[i]
		if o.UID == vm.UID || o.DeletionTimestamp != nil || !writes && !o.Spec.Guest.WritesClaim(claim) {
			continue
		}
		if o.Status.PodUID != "" && !terminal(o.Status.Phase) {
			return &cause{vmv1.ReasonClaimInUse, fmt.Sprintf("PersistentVolumeClaim %q is in use by VirtualMachine %s, whose guest runs: two VMs never write one disk; stop %s (runStrategy: Halted) or give this VM another claim",
				claim, o.Name, o.Name)}, nil
		}
		if firstCreated(o, vm) && wantsToRun(o) {
			return &cause{vmv1.ReasonClaimInUse, fmt.Sprintf("PersistentVolumeClaim %q is also named by VirtualMachine %s, created first, which starts on it: two VMs never write one disk; stop %s (runStrategy: Halted) or give this VM another claim",
				claim, o.Name, o.Name)}, nil
		}
	}
	return nil, nil
}

// wantsToRun is a VM that runs or will: not halted, and not ended for good. A guest that ended
// under a strategy that restarts it (Always; RerunOnFailure after a failure) shows a terminal
// phase only until its restart is counted, and must not lose its claims in that moment.
func wantsToRun(vm *vmv1.VirtualMachine) bool {
	if vm.Spec.Halted() {
		return false
	}
	p := vm.Status.Phase
	return !terminal(p) || restarts(vm.Spec.RunStrategy, p == vmv1.PhaseFailed)
}

func firstCreated(a, b *vmv1.VirtualMachine) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// claimUse names what the VM uses a claim for, for messages.
func claimUse(g *vmv1.GuestSpec, claim string) string {
	var uses []string
	for c := range g.Claims() {
		if c.ClaimName != claim {
			continue
		}
		switch c.Use {
		case vmv1.ClaimRootDisk:
			uses = append(uses, "the root disk")
		case vmv1.ClaimDataDisk:
			uses = append(uses, "disk "+c.Name)
		case vmv1.ClaimFilesystem:
			uses = append(uses, "filesystem "+c.Name)
		case vmv1.ClaimState:
			uses = append(uses, "spec.guest.stateClaim")
		}
	}
	return strings.Join(uses, ", ")
}

// stateClaimUnfit says why the state claim cannot keep the guest's state: a Block claim (the
// state is a file), or one too small for the guest's memory (its maxMemory, which a live
// resize may reach) plus vmv1.StateOverheadMiB. nil when it fits, or its size is not known.
func stateClaimUnfit(g *vmv1.GuestSpec, claim podspec.Claim) *cause {
	name := g.StateClaim.ClaimName
	if claim.Block {
		return &cause{vmv1.ReasonStateClaimUnfit, fmt.Sprintf("PersistentVolumeClaim %q (spec.guest.stateClaim) is a Block claim: the guest's state is a file; name a Filesystem claim", name)}
	}
	mem := g.Memory
	if g.MaxMemory != nil && g.MaxMemory.Cmp(mem) > 0 {
		mem = *g.MaxMemory
	}
	need := (mem.Value()+(1<<20)-1)>>20 + vmv1.StateOverheadMiB
	if claim.SizeMiB > 0 && claim.SizeMiB < need {
		return &cause{vmv1.ReasonStateClaimUnfit, fmt.Sprintf("PersistentVolumeClaim %q (spec.guest.stateClaim) holds %dMi, and the guest's state may need %dMi (its memory, %s, plus %dMi): name a claim of at least %dMi",
			name, claim.SizeMiB, need, mem.String(), vmv1.StateOverheadMiB, need)}
	}
	return nil
}

func configMapDisk(g *vmv1.GuestSpec, name string) string {
	var disks []string
	for _, d := range g.Disks {
		if d.ConfigMap != nil && d.ConfigMap.Name == name {
			disks = append(disks, "disk "+d.Name)
		}
	}
	for _, f := range g.Filesystems {
		if f.ConfigMap != nil && f.ConfigMap.Name == name {
			disks = append(disks, "filesystem "+f.Name)
		}
	}
	return strings.Join(disks, ", ")
}

// vmsNaming maps a claim's or ConfigMap's event to the VMs in its namespace that name it.
func (r *Reconciler) vmsNaming(index string) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		list := &vmv1.VirtualMachineList{}
		if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{index: o.GetName()}); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
		return reqs
	}
}

// vmsSharingClaims maps a VM's event to the other VMs that name one of its claims: one that
// stops, halts or goes away may let another start.
func (r *Reconciler) vmsSharingClaims(ctx context.Context, o client.Object) []reconcile.Request {
	vm, ok := o.(*vmv1.VirtualMachine)
	if !ok {
		return nil
	}
	var reqs []reconcile.Request
	for _, claim := range vm.Spec.Guest.ClaimNames() {
		for _, req := range r.vmsNaming(indexClaims)(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: claim}}) {
			if req.Name != vm.Name {
				reqs = append(reqs, req)
			}
		}
	}
	return reqs
}

// secretDisksHint names the Secrets a starting runner pod mounts for disks: a missing one leaves
// the pod in ContainerCreating, and only the kubelet's FailedMount event says why.
func secretDisksHint(pod *corev1.Pod) string {
	var names []string
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil && v.Name != podspec.CloudInitVolume {
			names = append(names, fmt.Sprintf("%q", v.Secret.SecretName))
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("; the pod mounts Secret %s for disks: if one is missing, the pod's FailedMount event says so", strings.Join(names, ", "))
}

// vmsSharingPodClaims maps a runner pod's end or deletion to the VMs, other than its own, that
// name one of its claims; a copier pod's to every VM that does.
func (r *Reconciler) vmsSharingPodClaims(ctx context.Context, o client.Object) []reconcile.Request {
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return nil
	}
	var reqs []reconcile.Request
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		for _, req := range r.vmsNaming(indexClaims)(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: v.PersistentVolumeClaim.ClaimName}}) {
			// A copier pod (a snapshot's) holds its own VM's claims too.
			if req.Name != pod.Labels[podspec.LabelVMName] || pod.Labels[vmv1.LabelCopierOf] != "" {
				reqs = append(reqs, req)
			}
		}
	}
	return reqs
}
