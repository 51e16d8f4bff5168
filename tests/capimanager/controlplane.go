package capimanager

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
)

// TestControlPlaneGroup is the API group of TestControlPlane, a control-plane kind of the Cluster
// API contract with no controller: a test sets its status as a control plane provider would.
const TestControlPlaneGroup = "controlplane.test.virtpod.io"

// InstallTestControlPlaneKind installs TestControlPlane (with the contract label Cluster API
// reads and clusterctl's inventory label) and waits until it is served.
func InstallTestControlPlaneKind(ctx context.Context, c client.Client) error {
	crd := &apiextensionsv1.CustomResourceDefinition{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: "testcontrolplanes." + TestControlPlaneGroup,
			Labels: map[string]string{"cluster.x-k8s.io/v1beta2": "v1alpha1", "clusterctl.cluster.x-k8s.io": ""}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: TestControlPlaneGroup, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "TestControlPlane", ListKind: "TestControlPlaneList",
				Plural: "testcontrolplanes", Singular: "testcontrolplane"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1alpha1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}}}}}}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		return err
	}
	if err := c.Create(ctx, &unstructured.Unstructured{Object: obj}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	l := &unstructured.UnstructuredList{}
	l.SetAPIVersion(TestControlPlaneGroup + "/v1alpha1")
	l.SetKind("TestControlPlaneList")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		err := c.List(ctx, l)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("TestControlPlane not served after 30 s: %w", err)
		}
	}
}

// InitializedControlPlane creates a TestControlPlane (installing the kind first) that says what
// a control plane provider says once its first control plane is up; externallyManaged adds what
// a hosted one (Kamaji's) says: there are no control-plane Machines, so Cluster API may still
// drain and delete a worker's Node.
func InitializedControlPlane(ctx context.Context, c client.Client, ns, name string, externallyManaged bool) error {
	if err := InstallTestControlPlaneKind(ctx, c); err != nil {
		return err
	}
	cp := &unstructured.Unstructured{}
	cp.SetAPIVersion(TestControlPlaneGroup + "/v1alpha1")
	cp.SetKind("TestControlPlane")
	cp.SetNamespace(ns)
	cp.SetName(name)
	if err := c.Create(ctx, cp); err != nil {
		return err
	}
	_ = unstructured.SetNestedField(cp.Object, true, "status", "initialization", "controlPlaneInitialized")
	if externallyManaged {
		_ = unstructured.SetNestedField(cp.Object, true, "status", "externalManagedControlPlane")
	}
	return c.Status().Update(ctx, cp)
}

// Kamaji is what Kamaji's control-plane provider leaves in the management cluster for a tenant
// whose control plane it hosts, as Cluster API and virtpod see it.
type Kamaji struct {
	Namespace, Name string // the Cluster's
	Host            string // the control plane's endpoint
	Port            int32
	Kubeconfig      []byte // published in <name>-kubeconfig
	CACert, CAKey   []byte // published in <name>-ca
}

// Wire creates the <name>-kubeconfig and <name>-ca Secrets, a TestControlPlane that says it is
// initialized and externally managed, and the VirtPodCluster annotated managed-by whose endpoint
// it then sets with Kamaji's exact merge patch. The Cluster is the caller's.
func (k Kamaji) Wire(ctx context.Context, c client.Client) error {
	for secret, data := range map[string]map[string][]byte{
		k.Name + "-kubeconfig": {"value": k.Kubeconfig},
		k.Name + "-ca":         {corev1.TLSCertKey: k.CACert, corev1.TLSPrivateKeyKey: k.CAKey},
	} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: secret, Labels: map[string]string{clusterv1.ClusterNameLabel: k.Name}},
			Type: clusterv1.ClusterSecretType, Data: data}
		if err := c.Create(ctx, s); err != nil {
			return err
		}
	}
	if err := InitializedControlPlane(ctx, c, k.Namespace, k.Name, true); err != nil {
		return err
	}
	vc := &infrav1.VirtPodCluster{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name,
		Annotations: map[string]string{infrav1.ManagedByAnnotation: "kamaji"}}}
	if err := c.Create(ctx, vc); err != nil {
		return err
	}
	patch := fmt.Appendf(nil, `{"spec":{"controlPlaneEndpoint":{"host":%q,"port":%d}}}`, k.Host, k.Port)
	return c.Patch(ctx, vc, client.RawPatch("application/merge-patch+json", patch))
}
