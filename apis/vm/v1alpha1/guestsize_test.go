package v1alpha1_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// schema is the part of an OpenAPI schema these checks read.
type schema struct {
	Minimum     *float64          `json:"minimum"`
	Maximum     *float64          `json:"maximum"`
	Properties  map[string]schema `json:"properties"`
	Validations []struct {
		Rule    string `json:"rule"`
		Message string `json:"message"`
	} `json:"x-kubernetes-validations"`
}

// guestSchema is spec.guest of the generated VirtualMachine CRD.
func guestSchema(t *testing.T) schema {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(kubeapi.Root(), "config/crd/bases/vm.virtpod.io_virtualmachines.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema schema `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil || len(crd.Spec.Versions) != 1 {
		t.Fatalf("reading the CRD: %v (%d versions)", err, len(crd.Spec.Versions))
	}
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["guest"]
}

func quantity(bytes int64) string { return resource.NewQuantity(bytes, resource.BinarySI).String() }

// TestCRDSizeRulesMatchGo: the CRD's markers spell the guest-size rules as literals (CEL cannot
// read Go), so each literal must equal its constant in guestsize.go; a change to one side alone
// fails here.
func TestCRDSizeRulesMatchGo(t *testing.T) {
	guest := guestSchema(t)
	for _, f := range []string{"cpus", "maxCPUs"} {
		p := guest.Properties[f]
		if p.Minimum == nil || p.Maximum == nil {
			t.Fatalf("spec.guest.%s has no minimum or maximum", f)
		}
		if int32(*p.Minimum) != vmv1.MinGuestCPUs || int32(*p.Maximum) != vmv1.MaxGuestCPUs {
			t.Errorf("spec.guest.%s: minimum %v maximum %v, want %d and %d (MinGuestCPUs, MaxGuestCPUs)", f, *p.Minimum, *p.Maximum, vmv1.MinGuestCPUs, vmv1.MaxGuestCPUs)
		}
	}

	bounds := []string{quantity(vmv1.MinGuestMemory), quantity(vmv1.MaxGuestMemory)}
	literal := regexp.MustCompile(`quantity\('([^']*)'\)`)
	for _, f := range []string{"memory", "maxMemory"} {
		vs := guest.Properties[f].Validations
		if len(vs) != 1 {
			t.Fatalf("spec.guest.%s: %d rules, want its bounds", f, len(vs))
		}
		var got []string
		for _, m := range literal.FindAllStringSubmatch(vs[0].Rule, -1) {
			got = append(got, m[1])
		}
		if !slices.Equal(got, bounds) {
			t.Errorf("spec.guest.%s: the rule's bounds are %q, want %q (MinGuestMemory, MaxGuestMemory): %s", f, got, bounds, vs[0].Rule)
		}
		if !strings.Contains(vs[0].Message, bounds[0]+" and "+bounds[1]) {
			t.Errorf("spec.guest.%s: the message %q does not say %s and %s", f, vs[0].Message, bounds[0], bounds[1])
		}
	}

	// Every modulus in spec.guest's rules is the hotplug block, and one rule has it.
	modulus := regexp.MustCompile(`%\s*(\S+)`)
	block, n := vmv1.MemoryHotplugBlock, 0
	for _, v := range guest.Validations {
		for _, m := range modulus.FindAllStringSubmatch(v.Rule, -1) {
			n++
			if m[1] != strconv.FormatInt(block, 10) {
				t.Errorf("spec.guest: the rule takes %% %s, want %d (MemoryHotplugBlock): %s", m[1], block, v.Rule)
			}
			if !strings.Contains(v.Message, quantity(block)) {
				t.Errorf("spec.guest: the message %q does not name the block, %s", v.Message, quantity(block))
			}
		}
	}
	if n == 0 {
		t.Error("spec.guest: no rule checks memory against the hotplug block")
	}
}

// TestCeilMiB: whole MiB stay, any byte more is one MiB more.
func TestCeilMiB(t *testing.T) {
	for in, want := range map[int64]int64{0: 0, 1: 1, 1 << 20: 1, 1<<20 + 1: 2, 256 << 20: 256} {
		if got := vmv1.CeilMiB(in); got != want {
			t.Errorf("CeilMiB(%d) = %d, want %d", in, got, want)
		}
	}
}
