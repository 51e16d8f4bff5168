package manager

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// The dry run is a create (dry-run or not, the API server authorizes the create verb), only in
// the controller's own namespace.
// +kubebuilder:rbac:groups=vm.virtpod.io,resources=virtualmachines,verbs=create,namespace=virtpod-system

// VMCreatableCheck is the controller's readiness: ready once the API server admits a dry-run
// create of a VirtualMachine that names no provider. For some seconds after the CRDs are
// created the API server does not know their schema, and while a MutatingAdmissionPolicy
// matches (the default-provider one does whenever a default ProviderClass exists) it refuses
// every such create with 503 "Resource kind ... not found"; so `kubectl rollout status` on
// the controller also means a user's VM will be admitted. Once passed it stays passed: the
// window happens once per CRD, and a probe should not write to the API server forever.
type VMCreatableCheck struct {
	Client    client.Client // writes (the dry run) and uncached reads of ProviderClasses
	Namespace string        // where the dry-run VM is "created": the controller's own
	// Grace is how long an admitted but unmutated VM is waited on while a default
	// ProviderClass exists (the policy may not be loaded yet), before readiness passes anyway:
	// on a cluster without MutatingAdmissionPolicy, or with the policy left out, the
	// controller writes the default itself. Zero means DefaultMutationGrace.
	Grace time.Duration
	Now   func() time.Time // nil: time.Now
	Log   logr.Logger

	mu            sync.Mutex
	passed        bool
	firstUnpinned time.Time // first admitted dry run the default-provider policy did not pin
}

// DefaultMutationGrace: the API server loads a new policy within a second or so; a minute
// without it is a cluster that will not apply it.
const DefaultMutationGrace = time.Minute

// Check is a healthz.Checker. Probes are serialized, so a slow API server sees one dry run at
// a time, not one per probe.
func (c *VMCreatableCheck) Check(req *http.Request) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.passed {
		return nil
	}
	ctx, cancel := context.WithTimeout(req.Context(), 10*time.Second)
	defer cancel()
	err := c.try(ctx)
	if err == nil {
		c.passed = true
		c.Log.Info("ready: the API server admits VirtualMachines", "namespace", c.Namespace)
		return nil
	}
	c.Log.Info("not ready", "reason", err.Error())
	return err
}

func (c *VMCreatableCheck) try(ctx context.Context) error {
	vm := readinessVM(c.Namespace)
	if err := c.Client.Create(ctx, vm, client.DryRunAll); err != nil {
		return fmt.Errorf("a VirtualMachine cannot be created yet (dry run in namespace %q): %w", c.Namespace, err)
	}
	if vm.Spec.Provider != "" {
		return nil // the default-provider policy ran: the API server knows the schema
	}
	// Unpinned: either no default class (the policy matched nothing, so it cannot refuse
	// a user's VM either), or the policy did not run.
	var classes vmv1.ProviderClassList
	if err := c.Client.List(ctx, &classes); err != nil {
		return fmt.Errorf("listing ProviderClasses: %w", err)
	}
	def := defaultClass(classes.Items)
	if def == "" {
		return nil
	}
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	if c.firstUnpinned.IsZero() {
		c.firstUnpinned = now
	}
	grace := c.Grace
	if grace == 0 {
		grace = DefaultMutationGrace
	}
	if waited := now.Sub(c.firstUnpinned); waited < grace {
		return fmt.Errorf("a dry-run VirtualMachine was admitted without spec.provider although ProviderClass %s is the default: "+
			"the MutatingAdmissionPolicy virtpod-default-provider has not run (waited %s of %s for it)", def, waited.Round(time.Second), grace)
	}
	c.Log.Info("the default-provider policy does not run; ready anyway, the controller writes the default provider itself", "defaultClass", def)
	return nil
}

// defaultClass is the class the default-provider policy would pin a VM to: the one whose
// status says so, else the sole one annotated (the controller may not have written the
// status yet, and the policy will match as soon as it has).
func defaultClass(classes []vmv1.ProviderClass) string {
	annotated := ""
	n := 0
	for _, c := range classes {
		if c.Status.Default {
			return c.Name
		}
		if c.Annotations[vmv1.AnnotationDefaultClass] == "true" {
			annotated, n = c.Name, n+1
		}
	}
	if n == 1 {
		return annotated
	}
	return ""
}

// readinessVM is a small valid VM that names no provider, so the default-provider policy
// matches it as it matches a user's. generateName: it never collides with a real VM.
func readinessVM(namespace string) *vmv1.VirtualMachine {
	return &vmv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "virtpod-readiness-"},
		Spec: vmv1.VirtualMachineSpec{
			Guest: vmv1.GuestSpec{
				CPUs:        1,
				Memory:      resource.MustParse("64Mi"),
				KernelImage: "virtpod.invalid/readiness-dry-run:never-pulled",
				RootDisk:    vmv1.RootDisk{Image: "virtpod.invalid/readiness-dry-run:never-pulled"},
			},
		},
	}
}
