package capi

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/virtpod/virtpod/controllers/clusterapi/virtpodcluster"
	"github.com/virtpod/virtpod/pkg/clusterapi/controlplaneservice"
)

// TestServiceWaitsForItsClusterIP: the API server frees a deleted Service's cluster IP (its
// IPAddress object) after watchers have seen the delete, so virtpod's re-create can find the
// published IP still held by its own predecessor. It must wait for it, not move the cluster's
// endpoint to a new address. A finalizer on the IPAddress stretches that moment to seconds.
func TestServiceWaitsForItsClusterIP(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	_, vc := newCluster(t, ns, "held", nil, nil)
	published := publishedEndpoint(t, vc)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: controlplaneservice.Name(vc.Name)}}
	get(t, svc)

	addr := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: published.Host}}
	get(t, addr)
	if p := addr.Spec.ParentRef; p == nil || p.Resource != "services" || p.Namespace != ns || p.Name != svc.Name {
		t.Fatalf("IPAddress %s parent %+v, want Service %s/%s", addr.Name, p, ns, svc.Name)
	}
	finalizers := func(patch string) error {
		return env.Client.Patch(ctx, addr, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":`+patch+`}}`)))
	}
	if err := finalizers(`["test.virtpod.io/hold"]`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = finalizers("null") })

	if err := env.Client.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "IPAddress released by the API server, held by the finalizer", func() error {
		if get(t, addr).DeletionTimestamp == nil {
			return fmt.Errorf("IPAddress %s not being deleted", addr.Name)
		}
		return nil
	})
	// While the IP is held, no Service at another address appears (the controller's retries
	// run at back-off from 5 ms, so a few seconds see several of them).
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		s := &corev1.Service{}
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(svc), s)
		if err == nil && s.UID != svc.UID {
			t.Fatalf("Service re-created at %s while its published IP %s was still being freed; want it to wait", s.Spec.ClusterIP, published.Host)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}

	// A reconcile whose cache still holds the deleted Service must not re-create it elsewhere
	// either: that was CI's failure, an apply racing the delete.
	stale := &virtpodcluster.Reconciler{Client: staleService{Client: env.Client, svc: svc}, APIReader: env.Client, Recorder: events.NewFakeRecorder(10)}
	_, err := stale.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(vc)})
	if err == nil || !strings.Contains(err.Error(), "still held by the deleted Service") {
		t.Errorf("reconcile with the deleted Service in its cache: error %v, want it to wait for %s", err, published.Host)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(svc), &corev1.Service{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after a reconcile with a stale cache, Service get: %v; want none until the IP is free", err)
	}

	if err := finalizers("null"); err != nil {
		t.Fatal(err)
	}
	recreatedAt(t, svc, published.Host)
	if got := get(t, vc).Spec.ControlPlaneEndpoint; got != published {
		t.Errorf("endpoint %v, want the published %v", got, published)
	}
	events := &eventsv1.EventList{}
	if err := env.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Regarding.Name == vc.Name && e.Type == corev1.EventTypeWarning {
			t.Errorf("Warning event %s: %s; waiting for the IP is not news", e.Reason, e.Note)
		}
	}
}

// staleService is a cache that still holds a Service the API server has deleted.
type staleService struct {
	client.Client
	svc *corev1.Service
}

func (s staleService) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if out, ok := obj.(*corev1.Service); ok && key == client.ObjectKeyFromObject(s.svc) {
		s.svc.DeepCopyInto(out)
		return nil
	}
	return s.Client.Get(ctx, key, obj, opts...)
}
