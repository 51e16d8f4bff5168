package vm

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

func (r *Reconciler) indexDisks(mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(context.Background(), &vmv1.VirtualMachine{}, indexClaims, func(o client.Object) []string {
		return o.(*vmv1.VirtualMachine).Spec.Guest.ClaimNames()
	}); err != nil {
		return err
	}
	return idx.IndexField(context.Background(), &vmv1.VirtualMachine{}, indexConfigMaps, func(o client.Object) []string {
		return o.(*vmv1.VirtualMachine).Spec.Guest.ConfigMapNames()
	})
}

// watchDisks makes what the disks name drive the VMs that name it: a claim's creation, binding,
// loss or deletion; a ConfigMap's creation or deletion; another VM on the same claim that stops
// or goes away. ConfigMaps are watched by metadata only, in a cache of their own: the manager's
// ConfigMap cache holds only the image map, and nothing of a disk's ConfigMap's data is needed.
func (r *Reconciler) watchDisks(mgr ctrl.Manager, b *builder.Builder) (*builder.Builder, error) {
	b = b.Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(r.vmsNaming(indexClaims)),
		builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*corev1.PersistentVolumeClaim), e.ObjectNew.(*corev1.PersistentVolumeClaim)
			return o.Status.Phase != n.Status.Phase || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil)
		}}))
	b = b.Watches(&vmv1.VirtualMachine{}, handler.EnqueueRequestsFromMapFunc(r.vmsSharingClaims),
		builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false },
			UpdateFunc: func(e event.UpdateEvent) bool {
				o, n := e.ObjectOld.(*vmv1.VirtualMachine), e.ObjectNew.(*vmv1.VirtualMachine)
				return len(n.Spec.Guest.ClaimNames()) > 0 && (o.Status.PodUID != n.Status.PodUID || o.Status.Phase != n.Status.Phase ||
					n.DeletionTimestamp != nil || o.Spec.RunStrategy != n.Spec.RunStrategy)
			},
		}))
	// A runner pod that ends or goes away frees its claims, whatever its VM does meanwhile.
	b = b.Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.vmsSharingPodClaims),
		builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false },
			UpdateFunc: func(e event.UpdateEvent) bool {
				return !podEnded(e.ObjectOld.(*corev1.Pod)) && podEnded(e.ObjectNew.(*corev1.Pod))
			},
		}))
	if r.ConfigMaps == nil {
		c, err := cache.New(mgr.GetConfig(), cache.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
		if err != nil {
			return nil, err
		}
		if err := mgr.Add(c); err != nil {
			return nil, err
		}
		r.ConfigMaps = c
		cm := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}}
		b = b.WatchesRawSource(source.Kind[client.Object](c, cm, handler.EnqueueRequestsFromMapFunc(r.vmsNaming(indexConfigMaps)),
			predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}))
	}
	return b, nil
}
