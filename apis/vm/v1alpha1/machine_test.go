package v1alpha1_test

import (
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

func TestMachineForQEMU(t *testing.T) {
	for v, want := range map[string]string{
		"7.2.22":     "pc-q35-7.2",
		"10.0.13":    "pc-q35-10.0",
		"9.0.50":     "pc-q35-9.0",
		"":           "",
		"7.2":        "",
		"41.0.0-ch":  "pc-q35-41.0", // the caller asks only of qemu's version
		"v10.0.0":    "",
		"10.0.0\n-x": "pc-q35-10.0",
	} {
		if got := vmv1.MachineForQEMU(v); got != want {
			t.Errorf("MachineForQEMU(%q) = %q, want %q", v, got, want)
		}
	}
}
