package vm_test

import (
	"context"
	"fmt"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	vmctrl "github.com/virtpod/virtpod/controllers/vm"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestCurrentReadsTheServer: a restart's pod is made only from the VM the server holds; a VM
// read before a newer write (a cache behind) is not current.
func TestCurrentReadsTheServer(t *testing.T) {
	ns := namespace(t)
	vm := create(t, kubeapi.SampleVM(ns, "current"))
	// The controller writes the VM's status meanwhile: a write landing between the read and
	// the check makes the read not current, rightly; read again then.
	var read *vmv1.VirtualMachine
	eventually(t, "a VM just read is current", func() error {
		read = getVM(t, vm)
		if ok, err := vmctrl.Current(context.Background(), env.Client, read); err != nil || !ok {
			return fmt.Errorf("current %v, %v", ok, err)
		}
		return nil
	})
	reconciled(t, vm, func(v *vmv1.VirtualMachine) { v.Annotations = map[string]string{"test/poke": "1"} })
	if ok, err := vmctrl.Current(context.Background(), env.Client, read); err != nil || ok {
		t.Fatalf("a VM read before a newer write: current %v, %v", ok, err)
	}
}
