package manager

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

func class(name string, annotated, statusDefault bool) *vmv1.ProviderClass {
	c := &vmv1.ProviderClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if annotated {
		c.Annotations = map[string]string{vmv1.AnnotationDefaultClass: "true"}
	}
	c.Status.Default = statusDefault
	return c
}

func TestDefaultClass(t *testing.T) {
	for _, tc := range []struct {
		name    string
		classes []*vmv1.ProviderClass
		want    string
	}{
		{"none", nil, ""},
		{"annotated, status not written yet", []*vmv1.ProviderClass{class("qemu", true, false), class("ch", false, false)}, "qemu"},
		{"status says", []*vmv1.ProviderClass{class("qemu", false, true)}, "qemu"},
		{"rivals: the policy pins none", []*vmv1.ProviderClass{class("a", true, false), class("b", true, false)}, ""},
	} {
		var items []vmv1.ProviderClass
		for _, c := range tc.classes {
			items = append(items, *c)
		}
		if got := defaultClass(items); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// checkWith is a check whose dry runs answer with the next of answers (nil: admitted, pinned
// to provider pin if not empty) and counts them.
func checkWith(t *testing.T, pin vmv1.Provider, answers []error, objs ...client.Object) (*VMCreatableCheck, *int) {
	t.Helper()
	calls := 0
	c := fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			calls++
			err := answers[min(calls, len(answers))-1]
			if err == nil && pin != "" {
				obj.(*vmv1.VirtualMachine).Spec.Provider = pin
			}
			return err
		},
	}).Build()
	return &VMCreatableCheck{Client: c, Namespace: "virtpod-system"}, &calls
}

func TestCheckCachesSuccess(t *testing.T) {
	refused := apierrors.NewServiceUnavailable("Resource kind vm.virtpod.io/v1alpha1, Kind=VirtualMachine not found")
	check, calls := checkWith(t, vmv1.ProviderQEMU, []error{refused, nil}, class("qemu", true, true))
	req := httptest.NewRequest("GET", "/readyz", nil)
	if err := check.Check(req); err == nil || !strings.Contains(err.Error(), "Kind=VirtualMachine not found") {
		t.Fatalf("while refused: %v, want the API server's words", err)
	}
	for range 3 {
		if err := check.Check(req); err != nil {
			t.Fatal(err)
		}
	}
	if *calls != 2 {
		t.Errorf("%d dry runs, want 2: none after the first success", *calls)
	}
}

func TestUnpinnedWaitsForThePolicyThenGivesUp(t *testing.T) {
	now := time.Now()
	check, _ := checkWith(t, "", []error{nil}, class("qemu", true, false))
	check.Now = func() time.Time { return now }
	req := httptest.NewRequest("GET", "/readyz", nil)
	if err := check.Check(req); err == nil || !strings.Contains(err.Error(), "ProviderClass qemu is the default") {
		t.Fatalf("admitted unpinned with a default class: %v, want not ready", err)
	}
	now = now.Add(DefaultMutationGrace)
	if err := check.Check(req); err != nil {
		t.Fatalf("after the grace: %v", err)
	}
	noDefault, _ := checkWith(t, "", []error{nil}, class("a", true, false), class("b", true, false))
	if err := noDefault.Check(req); err != nil {
		t.Fatalf("no default class (nothing to pin, nothing to refuse): %v", err)
	}
}
