package capi

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/clusterapi"
	"github.com/virtpod/virtpod/pkg/clusterapi/controlplaneservice"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

const timeout = 60 * time.Second

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	kubeapi.Eventually(t, what, timeout, check)
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "capi-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// newCluster creates a VirtPodCluster and the Cluster API Cluster that references it; Cluster
// API's own controller makes the Cluster its owner.
func newCluster(t *testing.T, ns, name string, annotations map[string]string, mutate func(*infrav1.VirtPodCluster)) (*clusterv1.Cluster, *infrav1.VirtPodCluster) {
	t.Helper()
	ctx := context.Background()
	vc := &infrav1.VirtPodCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations}}
	if mutate != nil {
		mutate(vc)
	}
	if err := env.Client.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	cl := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "VirtPodCluster", Name: name}}}
	if err := env.Client.Create(ctx, cl); err != nil {
		t.Fatal(err)
	}
	return cl, vc
}

func get[T client.Object](t *testing.T, obj T) T {
	t.Helper()
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

func condition(conds []metav1.Condition, typ string) string {
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		return typ + " unset"
	}
	return fmt.Sprintf("%s=%s/%s: %s", typ, c.Status, c.Reason, c.Message)
}

// provisionedCluster waits until Cluster API's own controller reports the Cluster's
// infrastructure provisioned with endpoint want, and the Cluster in phase Provisioned.
func provisionedCluster(t *testing.T, cl *clusterv1.Cluster, want clusterv1.APIEndpoint) {
	t.Helper()
	eventually(t, "Cluster "+cl.Name+" provisioned by Cluster API", func() error {
		c := get(t, cl)
		if c.Status.Initialization.InfrastructureProvisioned == nil || !*c.Status.Initialization.InfrastructureProvisioned {
			return fmt.Errorf("status.initialization.infrastructureProvisioned not true; phase %q", c.Status.Phase)
		}
		if c.Spec.ControlPlaneEndpoint != want {
			return fmt.Errorf("Cluster endpoint %v, want %v", c.Spec.ControlPlaneEndpoint, want)
		}
		if c.Status.Phase != string(clusterv1.ClusterPhaseProvisioned) {
			return fmt.Errorf("phase %q", c.Status.Phase)
		}
		return nil
	})
}

func TestClusterServiceAndEndpoint(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	cl, vc := newCluster(t, ns, "alpha", nil, nil)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: controlplaneservice.Name(vc.Name)}}
	eventually(t, "control-plane Service created", func() error {
		return env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)
	})
	wantSelector := map[string]string{vmv1.LabelManagedBy: vmv1.ManagedBy,
		infrav1.ClusterNameLabel: "alpha", infrav1.ControlPlaneLabel: ""}
	if fmt.Sprint(svc.Spec.Selector) != fmt.Sprint(wantSelector) {
		t.Errorf("selector %v, want %v", svc.Spec.Selector, wantSelector)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 6443 || svc.Spec.Ports[0].TargetPort.IntVal != 6443 {
		t.Errorf("ports %+v, want 6443 -> 6443", svc.Spec.Ports)
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || !metav1.IsControlledBy(svc, get(t, vc)) {
		t.Errorf("type %s, owner %v: want a ClusterIP Service controlled by the VirtPodCluster", svc.Spec.Type, svc.OwnerReferences)
	}
	want := clusterv1.APIEndpoint{Host: svc.Spec.ClusterIP, Port: 6443}
	eventually(t, "endpoint and provisioned", func() error {
		vc := get(t, vc)
		if vc.Spec.ControlPlaneEndpoint != want {
			return fmt.Errorf("spec.controlPlaneEndpoint %v, want %v", vc.Spec.ControlPlaneEndpoint, want)
		}
		if vc.Status.Initialization.Provisioned == nil || !*vc.Status.Initialization.Provisioned || !vc.Status.Ready {
			return fmt.Errorf("not provisioned: %s", condition(vc.Status.Conditions, infrav1.ReadyCondition))
		}
		return nil
	})
	provisionedCluster(t, cl, want)

	// Deleted: re-created at the same address, so the endpoint the Cluster holds stays true.
	if err := env.Client.Delete(ctx, svc, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	recreatedAt(t, svc, svc.Spec.ClusterIP)

	// Template change: type, labels and annotations applied; a dropped label is dropped.
	patchVC(t, vc, func(v *infrav1.VirtPodCluster) {
		v.Spec.ControlPlaneService = infrav1.ControlPlaneService{Type: corev1.ServiceTypeNodePort,
			Labels: map[string]string{"team": "infra"}, Annotations: map[string]string{"example.com/lb": "internal"}}
	})
	eventually(t, "template applied", func() error {
		s := get(t, svc.DeepCopy())
		if s.Spec.Type != corev1.ServiceTypeNodePort || s.Labels["team"] != "infra" || s.Annotations["example.com/lb"] != "internal" {
			return fmt.Errorf("type %s labels %v annotations %v", s.Spec.Type, s.Labels, s.Annotations)
		}
		return nil
	})
	patchVC(t, vc, func(v *infrav1.VirtPodCluster) { v.Spec.ControlPlaneService.Labels = nil })
	eventually(t, "dropped label removed", func() error {
		if s := get(t, svc.DeepCopy()); s.Labels["team"] != "" {
			return fmt.Errorf("labels %v", s.Labels)
		}
		return nil
	})
	if got := get(t, vc).Spec.ControlPlaneEndpoint; got != want {
		t.Errorf("endpoint moved to %v after template changes, want %v", got, want)
	}
}

// recreatedAt waits for a Service other than old under its name, and fails unless it has the
// cluster IP ip.
func recreatedAt(t *testing.T, old *corev1.Service, ip string) {
	t.Helper()
	eventually(t, "Service re-created", func() error {
		s := &corev1.Service{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(old), s); err != nil {
			return err
		}
		if s.UID == old.UID {
			return fmt.Errorf("still the old Service")
		}
		if s.Spec.ClusterIP != ip {
			t.Fatalf("re-created at %s, want the published %s", s.Spec.ClusterIP, ip)
		}
		return nil
	})
}

func patchVC(t *testing.T, vc *infrav1.VirtPodCluster, mutate func(*infrav1.VirtPodCluster)) {
	t.Helper()
	eventually(t, "VirtPodCluster updated", func() error {
		v := get(t, vc.DeepCopy())
		mutate(v)
		return env.Client.Update(context.Background(), v)
	})
}

func TestClusterKeepsPresetEndpoint(t *testing.T) {
	ns := namespace(t)
	preset := clusterv1.APIEndpoint{Host: "api.example.com", Port: 443}
	cl, vc := newCluster(t, ns, "beta", nil, func(v *infrav1.VirtPodCluster) { v.Spec.ControlPlaneEndpoint = preset })
	eventually(t, "provisioned with the preset endpoint", func() error {
		v := get(t, vc)
		if v.Status.Initialization.Provisioned == nil || !*v.Status.Initialization.Provisioned {
			return fmt.Errorf("not provisioned: %s", condition(v.Status.Conditions, infrav1.ReadyCondition))
		}
		if c := meta.FindStatusCondition(v.Status.Conditions, infrav1.ControlPlaneEndpointReadyCondition); c == nil || c.Reason != "EndpointSetExternally" {
			return fmt.Errorf("%s", condition(v.Status.Conditions, infrav1.ControlPlaneEndpointReadyCondition))
		}
		if v.Status.ControlPlaneServiceName == "" {
			return fmt.Errorf("no Service yet")
		}
		return nil
	})
	provisionedCluster(t, cl, preset)
	if got := get(t, vc).Spec.ControlPlaneEndpoint; got != preset {
		t.Fatalf("preset endpoint overwritten with %v", got)
	}
}

// TestManagedByKamaji plays Kamaji: no Service at any point, the endpoint untouched until the
// managing controller patches only spec.controlPlaneEndpoint, then provisioned.
func TestManagedByKamaji(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	cl, vc := newCluster(t, ns, "kamaji", map[string]string{infrav1.ManagedByAnnotation: "kamaji"}, nil)
	noService := func() {
		t.Helper()
		list := &corev1.ServiceList{}
		if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 0 {
			t.Fatalf("a managed cluster got a Service: %s", list.Items[0].Name)
		}
	}
	eventually(t, "waiting for the external endpoint", func() error {
		v := get(t, vc)
		if c := meta.FindStatusCondition(v.Status.Conditions, infrav1.ReadyCondition); c == nil || c.Reason != "WaitingForExternalEndpoint" {
			return fmt.Errorf("%s", condition(v.Status.Conditions, infrav1.ReadyCondition))
		}
		return nil
	})
	noService()
	v := get(t, vc)
	if !v.Spec.ControlPlaneEndpoint.IsZero() || (v.Status.Initialization.Provisioned != nil && *v.Status.Initialization.Provisioned) {
		t.Fatalf("endpoint %v, provisioned %v before Kamaji set anything", v.Spec.ControlPlaneEndpoint, v.Status.Initialization.Provisioned)
	}
	// Kamaji's DynamicInfrastructureClusterPatch: a merge patch of only this field.
	patch := []byte(`{"spec":{"controlPlaneEndpoint":{"host":"192.0.2.50","port":6443}}}`)
	if err := env.Client.Patch(ctx, v, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	// Outside the test API server's Service range: a Service given the same address by chance
	// would look like the endpoint's source.
	kamaji := clusterv1.APIEndpoint{Host: "192.0.2.50", Port: 6443}
	eventually(t, "provisioned after Kamaji's patch", func() error {
		v := get(t, vc)
		if v.Status.Initialization.Provisioned == nil || !*v.Status.Initialization.Provisioned {
			return fmt.Errorf("%s", condition(v.Status.Conditions, infrav1.ReadyCondition))
		}
		return nil
	})
	provisionedCluster(t, cl, kamaji)
	noService()
	if got := get(t, vc).Spec.ControlPlaneEndpoint; got != kamaji {
		t.Fatalf("endpoint changed to %v", got)
	}

	// Removing the annotation later: virtpod creates its Service but never takes over the
	// endpoint Kamaji set.
	v = get(t, vc)
	delete(v.Annotations, infrav1.ManagedByAnnotation)
	if err := env.Client.Update(ctx, v); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Service after the annotation is removed", func() error {
		return env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: controlplaneservice.Name(vc.Name)}, &corev1.Service{})
	})
	eventually(t, "endpoint reported as set externally", func() error {
		v := get(t, vc)
		if c := meta.FindStatusCondition(v.Status.Conditions, infrav1.ControlPlaneEndpointReadyCondition); c == nil || c.Reason != "EndpointSetExternally" {
			return fmt.Errorf("%s", condition(v.Status.Conditions, infrav1.ControlPlaneEndpointReadyCondition))
		}
		return nil
	})
	if got := get(t, vc).Spec.ControlPlaneEndpoint; got != kamaji {
		t.Fatalf("endpoint changed to %v after the annotation was removed", got)
	}
}

func TestPausedClusterIsLeftAlone(t *testing.T) {
	ns := namespace(t)
	_, vc := newCluster(t, ns, "paused", map[string]string{infrav1.PausedAnnotation: ""}, nil)
	eventually(t, "Paused condition", func() error {
		v := get(t, vc)
		if !strings.Contains(condition(v.Status.Conditions, infrav1.PausedCondition), "Paused=True") {
			return fmt.Errorf("%s", condition(v.Status.Conditions, infrav1.PausedCondition))
		}
		return nil
	})
	err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: controlplaneservice.Name(vc.Name)}, &corev1.Service{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("a paused cluster got a Service (err %v)", err)
	}
	v := get(t, vc)
	delete(v.Annotations, infrav1.PausedAnnotation)
	if err := env.Client.Update(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	eventually(t, "provisioned after unpausing", func() error {
		v := get(t, vc)
		if v.Status.Initialization.Provisioned == nil || !*v.Status.Initialization.Provisioned {
			return fmt.Errorf("%s", condition(v.Status.Conditions, infrav1.ReadyCondition))
		}
		return nil
	})
}

func TestFailureDomains(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	zones := func(vc *infrav1.VirtPodCluster) string {
		var names []string
		for _, fd := range get(t, vc).Status.FailureDomains {
			names = append(names, fd.Name)
		}
		return strings.Join(names, ",")
	}
	// The nodes' zones, when the cluster lists none; a node in a new zone adds it.
	for _, z := range []string{"zone-b", "zone-a"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "fd-", Labels: map[string]string{corev1.LabelTopologyZone: z}}}
		if err := env.Client.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, n) })
	}
	_, discovered := newCluster(t, ns, "zones", nil, nil)
	eventually(t, "zones from the nodes", func() error {
		if got := zones(discovered); !strings.Contains(got, "zone-a,zone-b") {
			return fmt.Errorf("failure domains %q", got)
		}
		return nil
	})
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "fd-", Labels: map[string]string{corev1.LabelTopologyZone: "zone-zz"}}}
	if err := env.Client.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, n) })
	eventually(t, "a new node's zone", func() error {
		if got := zones(discovered); !strings.Contains(got, "zone-zz") {
			return fmt.Errorf("failure domains %q", got)
		}
		return nil
	})
	// An explicit list wins over the nodes.
	no := false
	_, explicit := newCluster(t, ns, "listed", nil, func(v *infrav1.VirtPodCluster) {
		v.Spec.FailureDomains = []infrav1.FailureDomain{{Name: "rack-1"}, {Name: "rack-2", ControlPlane: &no}}
	})
	eventually(t, "the listed failure domains", func() error {
		fds := get(t, explicit).Status.FailureDomains
		if len(fds) != 2 || fds[0].Name != "rack-1" || *fds[0].ControlPlane != true || fds[1].Name != "rack-2" || *fds[1].ControlPlane != false {
			return fmt.Errorf("failure domains %+v", fds)
		}
		return nil
	})
}

// warningEvent waits for a Warning event about the VirtPodCluster with the given reason whose
// note contains want; events are written asynchronously.
func warningEvent(t *testing.T, vc *infrav1.VirtPodCluster, reason, want string) {
	t.Helper()
	eventually(t, "Warning event "+reason, func() error {
		list := &eventsv1.EventList{}
		if err := env.Client.List(context.Background(), list, client.InNamespace(vc.Namespace)); err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Kind != "VirtPodCluster" || e.Regarding.Name != vc.Name {
				continue
			}
			if e.Type == corev1.EventTypeWarning && e.Reason == reason && strings.Contains(e.Note, want) {
				return nil
			}
			seen = append(seen, e.Type+" "+e.Reason+": "+e.Note)
		}
		return fmt.Errorf("events: %q", seen)
	})
}

// publishedEndpoint waits until virtpod has written its Service's endpoint into the
// VirtPodCluster, and returns it.
func publishedEndpoint(t *testing.T, vc *infrav1.VirtPodCluster) (ep clusterv1.APIEndpoint) {
	t.Helper()
	eventually(t, "virtpod's endpoint published", func() error {
		v := get(t, vc.DeepCopy())
		if ep = v.Status.ServiceEndpoint; !ep.IsValid() || v.Spec.ControlPlaneEndpoint != ep {
			return fmt.Errorf("endpoint %v, published %v", v.Spec.ControlPlaneEndpoint, ep)
		}
		return nil
	})
	return ep
}

// TestEndpointOverwrittenWithoutAnnotation: Kamaji run without cluster.x-k8s.io/managed-by
// writes its endpoint over the one virtpod published from its Service. Cluster API keeps the
// first endpoint in the Cluster, so the VirtPodCluster says so, as a False condition and a
// Warning event that name the annotation, and leaves the endpoint alone.
func TestEndpointOverwrittenWithoutAnnotation(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	cl, vc := newCluster(t, ns, "overwritten", nil, nil)
	published := publishedEndpoint(t, vc)
	provisionedCluster(t, cl, published)

	// Kamaji's DynamicInfrastructureClusterPatch, without the annotation.
	kamaji := clusterv1.APIEndpoint{Host: "10.0.0.60", Port: 6443}
	patch := []byte(`{"spec":{"controlPlaneEndpoint":{"host":"10.0.0.60","port":6443}}}`)
	if err := env.Client.Patch(ctx, get(t, vc), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "overwritten endpoint reported", func() error {
		v := get(t, vc)
		c := meta.FindStatusCondition(v.Status.Conditions, infrav1.ControlPlaneEndpointReadyCondition)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != infrav1.ReasonEndpointOverwritten {
			return fmt.Errorf("%s", condition(v.Status.Conditions, infrav1.ControlPlaneEndpointReadyCondition))
		}
		for _, want := range []string{infrav1.ManagedByAnnotation, kamaji.String(), published.String(), "Cluster " + cl.Name + " keeps"} {
			if !strings.Contains(c.Message, want) {
				t.Fatalf("message does not name %q: %s", want, c.Message)
			}
		}
		return nil
	})
	warningEvent(t, vc, infrav1.ReasonEndpointOverwritten, infrav1.ManagedByAnnotation)
	v := get(t, vc)
	if v.Spec.ControlPlaneEndpoint != kamaji || !v.Status.Ready {
		t.Fatalf("endpoint %v, ready %v: want Kamaji's left alone and provisioned kept", v.Spec.ControlPlaneEndpoint, v.Status.Ready)
	}
	if got := get(t, cl).Spec.ControlPlaneEndpoint; got != published {
		t.Fatalf("Cluster endpoint %v: the condition says the Cluster keeps %v", got, published)
	}

	// Set back, as the message suggests: virtpod's endpoint again.
	patch = fmt.Appendf(nil, `{"spec":{"controlPlaneEndpoint":{"host":%q,"port":%d}}}`, published.Host, published.Port)
	if err := env.Client.Patch(ctx, get(t, vc), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "endpoint from the Service again", func() error {
		v := get(t, vc)
		if c := meta.FindStatusCondition(v.Status.Conditions, infrav1.ControlPlaneEndpointReadyCondition); c == nil || c.Status != metav1.ConditionTrue || c.Reason != infrav1.ReasonEndpointFromService {
			return fmt.Errorf("%s", condition(v.Status.Conditions, infrav1.ControlPlaneEndpointReadyCondition))
		}
		return nil
	})
}

// TestForeignServiceIsNotTakenOver: a Service someone else made under the control-plane
// Service's name (without virtpod's label, so outside the controller's cache) is refused like a
// foreign pod under a runner pod's name: never applied over, reported on the conditions and in
// a Warning event; once it is gone virtpod makes its own.
func TestForeignServiceIsNotTakenOver(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	foreign := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: controlplaneservice.Name("foreign")},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "theirs"}, Ports: []corev1.ServicePort{{Name: "https", Port: 443}}}}
	if err := env.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	cl, vc := newCluster(t, ns, "foreign", nil, nil)
	eventually(t, "name taken reported", func() error {
		v := get(t, vc)
		for _, typ := range []string{infrav1.ControlPlaneServiceReadyCondition, infrav1.ReadyCondition} {
			c := meta.FindStatusCondition(v.Status.Conditions, typ)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != infrav1.ReasonServiceNameTaken || !strings.Contains(c.Message, "Service "+foreign.Name) {
				return fmt.Errorf("%s", condition(v.Status.Conditions, typ))
			}
		}
		return nil
	})
	warningEvent(t, vc, infrav1.ReasonServiceNameTaken, foreign.Name)
	s := get(t, foreign.DeepCopy())
	if fmt.Sprint(s.Spec.Selector) != "map[app:theirs]" || len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Port != 443 || len(s.OwnerReferences) != 0 {
		t.Fatalf("the foreign Service was changed: selector %v, ports %+v, owners %v", s.Spec.Selector, s.Spec.Ports, s.OwnerReferences)
	}
	for _, mf := range s.ManagedFields {
		if mf.Manager == clusterapi.FieldOwner {
			t.Fatalf("virtpod applied to the foreign Service: %+v", mf)
		}
	}
	if v := get(t, vc); !v.Spec.ControlPlaneEndpoint.IsZero() || v.Status.Ready {
		t.Fatalf("endpoint %v, ready %v from a Service that is not virtpod's", v.Spec.ControlPlaneEndpoint, v.Status.Ready)
	}

	if err := env.Client.Delete(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{}
	eventually(t, "virtpod's own Service", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(foreign), svc); err != nil {
			return err
		}
		if !metav1.IsControlledBy(svc, get(t, vc)) {
			return fmt.Errorf("owners %v", svc.OwnerReferences)
		}
		return nil
	})
	provisionedCluster(t, cl, clusterv1.APIEndpoint{Host: svc.Spec.ClusterIP, Port: 6443})
}
