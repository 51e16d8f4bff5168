package capi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/manager"
	"github.com/virtpod/virtpod/pkg/clusterapi/controlplaneservice"
	"github.com/virtpod/virtpod/tests/capimanager"
	"github.com/virtpod/virtpod/tests/kubeapi"
	"github.com/virtpod/virtpod/tests/prereq"
)

// TestClusterctlMoveBlocked runs the real `clusterctl move` of a provisioned virtpod cluster to a
// second management cluster. A move deletes the moved objects in the source, and the garbage
// collector would then delete the VMs and the control-plane Service they own, so virtpod keeps
// clusterctl's block-move annotation on every VirtPodCluster: clusterctl says it waits for the
// annotation, nothing reaches the target and nothing is deleted in the source.
func TestClusterctlMoveBlocked(t *testing.T) {
	// Mostly waiting on Cluster API's controllers, in a namespace and tenant of its own: it
	// runs beside the package's other tests of a second API server.
	t.Parallel()
	bin := os.Getenv("TEST_ASSET_CLUSTERCTL")
	_, err := os.Stat(bin)
	prereq.Need(t, bin != "" && err == nil, "clusterctl ($TEST_ASSET_CLUSTERCTL, make capi) is needed")
	ctx := context.Background()
	ns := namespace(t)

	// A Cluster that clusterctl considers provisioned: its infrastructure (virtpod's Service
	// and endpoint) and a control plane that says it is initialized (a stand-in for Kamaji's or
	// kubeadm's, whose controllers do not run here).
	initializedControlPlane(t, ns, "moved", false)
	vc := &infrav1.VirtPodCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "moved"}}
	if err := env.Client.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	cl := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "moved"},
		Spec: clusterv1.ClusterSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "VirtPodCluster", Name: "moved"},
			ControlPlaneRef:   clusterv1.ContractVersionedObjectReference{APIGroup: testControlPlaneGroup, Kind: "TestControlPlane", Name: "moved"}}}
	if err := env.Client.Create(ctx, cl); err != nil {
		t.Fatal(err)
	}
	eventually(t, "VirtPodCluster moved annotated block-move", func() error {
		if got := get(t, vc).Annotations[infrav1.BlockMoveAnnotation]; got != infrav1.BlockMoveReason {
			return fmt.Errorf("annotation %s=%q", infrav1.BlockMoveAnnotation, got)
		}
		return nil
	})
	eventually(t, "Cluster moved provisioned with its control plane initialized", func() error {
		c := get(t, cl)
		if !ptrTrue(c.Status.Initialization.InfrastructureProvisioned) || !ptrTrue(c.Status.Initialization.ControlPlaneInitialized) ||
			!meta.IsStatusConditionTrue(c.Status.Conditions, clusterv1.ClusterControlPlaneInitializedCondition) {
			return fmt.Errorf("initialization %+v, %s", c.Status.Initialization, condition(c.Status.Conditions, clusterv1.ClusterControlPlaneInitializedCondition))
		}
		return nil
	})
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: controlplaneservice.Name("moved")}}
	svcUID := get(t, svc).UID

	// A second management cluster with Cluster API's and virtpod's CRDs, and both clusters with
	// the inventory `clusterctl init` would have written.
	target, err := kubeapi.Start(os.Getenv("TEST_ASSET_CAPI_CRDS"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = target.Stop() }()
	for _, e := range []*kubeapi.Env{env, target} {
		inventory(t, withCRDs(t, e))
	}
	from, err := env.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	to, err := target.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	out := clusterctlUntil(t, bin, "Move blocked by "+infrav1.BlockMoveAnnotation+" annotation",
		"move", "--kubeconfig", from, "--to-kubeconfig", to, "--namespace", ns)
	t.Logf("clusterctl move, stopped once blocked:\n%s", out)

	// Nothing reached the target; nothing left the source.
	var clusters clusterv1.ClusterList
	if err := target.Client.List(ctx, &clusters, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var vcs infrav1.VirtPodClusterList
	if err := target.Client.List(ctx, &vcs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(clusters.Items)+len(vcs.Items) != 0 {
		t.Errorf("the target holds %d Clusters and %d VirtPodClusters, want none", len(clusters.Items), len(vcs.Items))
	}
	if got := get(t, vc); got.DeletionTimestamp != nil || got.Annotations["clusterctl.cluster.x-k8s.io/delete-for-move"] != "" {
		t.Errorf("VirtPodCluster deleted or marked for deletion by the move: %+v", got.ObjectMeta)
	}
	if got := get(t, svc); got.UID != svcUID || got.DeletionTimestamp != nil {
		t.Errorf("control-plane Service replaced or deleted: uid %s → %s", svcUID, got.UID)
	}
	// clusterctl pauses the Cluster before it looks for the annotation and leaves it paused:
	// docs/capi.md tells users to unpause it, and virtpod then goes on as before.
	c := get(t, cl)
	if !ptrTrue(c.Spec.Paused) {
		t.Errorf("Cluster not paused by clusterctl (spec.paused %v): did the move get as far as the block?", c.Spec.Paused)
	}
	if err := env.Client.Patch(ctx, c, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"paused":false}}`))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "VirtPodCluster moved no longer paused", func() error {
		if p := meta.FindStatusCondition(get(t, vc).Status.Conditions, clusterv1.PausedCondition); p == nil || p.Status != metav1.ConditionFalse {
			return fmt.Errorf("%s", condition(get(t, vc).Status.Conditions, clusterv1.PausedCondition))
		}
		return nil
	})
	// Removed by hand, the annotation comes back.
	unblock := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:null}}}`, infrav1.BlockMoveAnnotation)
	if err := env.Client.Patch(ctx, get(t, vc), client.RawPatch("application/merge-patch+json", unblock)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "block-move back on VirtPodCluster moved", func() error {
		if got := get(t, vc).Annotations[infrav1.BlockMoveAnnotation]; got != infrav1.BlockMoveReason {
			return fmt.Errorf("annotation %s=%q", infrav1.BlockMoveAnnotation, got)
		}
		return nil
	})
}

func ptrTrue(b *bool) bool { return b != nil && *b }

// clusterctlUntil runs clusterctl until a line of its output contains want, then stops it, and
// returns what it printed. clusterctl waits out a block for about six minutes before it gives
// up; what it says in the first seconds is what this test is about.
func clusterctlUntil(t *testing.T, bin, want string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+cmd.Dir) // no user clusterctl config
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- cmd.Wait(); _ = w.Close() }()
	var out strings.Builder
	found := false
	sc := bufio.NewScanner(r)
	for !found && sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		found = strings.Contains(sc.Text(), want)
	}
	_ = cmd.Process.Kill()
	go func() { _, _ = io.Copy(io.Discard, r) }()
	err := <-ended
	if !found {
		t.Fatalf("clusterctl %s ended (%v) without saying %q:\n%s", strings.Join(args, " "), err, want, out.String())
	}
	return out.String()
}

const testControlPlaneGroup = capimanager.TestControlPlaneGroup

// initializedControlPlane: capimanager.InitializedControlPlane in ns of the tests' API server.
func initializedControlPlane(t *testing.T, ns, name string, externallyManaged bool) {
	t.Helper()
	if err := capimanager.InitializedControlPlane(context.Background(), env.Client, ns, name, externallyManaged); err != nil {
		t.Fatal(err)
	}
}

// withCRDs is a client of e that also knows CustomResourceDefinitions.
func withCRDs(t *testing.T, e *kubeapi.Env) client.Client {
	t.Helper()
	s := manager.Scheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(e.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// inventory writes what `clusterctl init` records in a management cluster: its Provider CRD and
// an entry per provider (Cluster API's core at the version the tests run, virtpod's), and the
// clusterctl label on the CRDs of the kinds a move considers.
func inventory(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "providers.clusterctl.cluster.x-k8s.io",
			Labels: map[string]string{"clusterctl.cluster.x-k8s.io/core": "inventory"}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "clusterctl.cluster.x-k8s.io", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Provider", ListKind: "ProviderList", Plural: "providers", Singular: "provider"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1alpha3", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}}}}}}
	if err := c.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	providers := []struct{ ns, name, providerName, typ, version string }{
		{"capi-system", "cluster-api", "cluster-api", "CoreProvider", "v1.14.2"},
		{"virtpod-system", "infrastructure-virtpod", "virtpod", "InfrastructureProvider", "v0.1.0"},
	}
	for _, p := range providers {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: map[string]any{"providerName": p.providerName, "type": p.typ, "version": p.version}}
		u.SetAPIVersion("clusterctl.cluster.x-k8s.io/v1alpha3")
		u.SetKind("Provider")
		u.SetNamespace(p.ns)
		u.SetName(p.name)
		kubeapi.Eventually(t, "Provider "+p.name+" created", 30*time.Second, func() error {
			if err := c.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
				return err // the CRD may not be served yet
			}
			return nil
		})
	}
	if err := labelCRDs(ctx, c, `{"clusterctl.cluster.x-k8s.io":""}`, clusterv1.GroupVersion.Group, infrav1.GroupVersion.Group, vmv1.GroupVersion.Group); err != nil {
		t.Fatal(err)
	}
}
