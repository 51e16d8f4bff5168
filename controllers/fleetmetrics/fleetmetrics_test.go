package fleetmetrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/fleetmetrics"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(m, &env) }

// TestCollect: what a real API server stores — VMs in two phases and one without, a
// ProviderClass available on one node and a disabled one, a node agent's heartbeat — is what the
// gauges say.
func TestCollect(t *testing.T) {
	ctx := context.Background()
	c := env.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fleet-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for name, phase := range map[string]vmv1.Phase{"a": vmv1.PhaseRunning, "b": vmv1.PhaseFailed, "c": vmv1.PhaseFailed, "d": ""} {
		vm := kubeapi.SampleVM(ns.Name, name)
		if err := c.Create(ctx, vm); err != nil {
			t.Fatal(err)
		}
		if phase != "" {
			before := vm.DeepCopy()
			vm.Status.Phase = phase
			if err := c.Status().Patch(ctx, vm, client.MergeFrom(before)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, ready := range map[string]int32{"qemu": 1, "cloud-hypervisor": 0} {
		pc := &vmv1.ProviderClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: vmv1.ProviderClassSpec{Handler: vmv1.Provider(name), Enabled: ptr.To(ready > 0)}}
		if err := c.Create(ctx, pc); err != nil {
			t.Fatal(err)
		}
		status := metav1.ConditionFalse
		if ready > 0 {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&pc.Status.Conditions, metav1.Condition{Type: vmv1.ConditionAvailable, Status: status, Reason: "Test", Message: "test"})
		pc.Status.ReadyNodes, pc.Status.TotalNodes = ready, 1
		// An update: a merge patch would leave out readyNodes 0, which the schema requires.
		if err := c.Status().Update(ctx, pc); err != nil {
			t.Fatal(err)
		}
	}
	beat := time.Unix(1700000000, 0)
	hn := &vmv1.HypervisorNode{ObjectMeta: metav1.ObjectMeta{Name: "fleet-node"}}
	if err := c.Create(ctx, hn); err != nil {
		t.Fatal(err)
	}
	before := hn.DeepCopy()
	hn.Status.HeartbeatTime = metav1.NewTime(beat)
	if err := c.Status().Patch(ctx, hn, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}

	want := `
# HELP virtpod_hypervisornode_heartbeat_timestamp_seconds When the node agent last probed its node (HypervisorNode status.heartbeatTime), in Unix seconds; a report older than 2 minutes is stale.
# TYPE virtpod_hypervisornode_heartbeat_timestamp_seconds gauge
virtpod_hypervisornode_heartbeat_timestamp_seconds{node="fleet-node"} 1.7e+09
# HELP virtpod_providerclass_available 1 when the ProviderClass's Available condition is True (enabled, and some node runs it), else 0.
# TYPE virtpod_providerclass_available gauge
virtpod_providerclass_available{providerclass="cloud-hypervisor"} 0
virtpod_providerclass_available{providerclass="qemu"} 1
# HELP virtpod_providerclass_enabled 1 when the ProviderClass is enabled (spec.enabled), else 0.
# TYPE virtpod_providerclass_enabled gauge
virtpod_providerclass_enabled{providerclass="cloud-hypervisor"} 0
virtpod_providerclass_enabled{providerclass="qemu"} 1
# HELP virtpod_providerclass_ready_nodes Nodes with a fresh node-agent report on which the ProviderClass's hypervisor runs (status.readyNodes).
# TYPE virtpod_providerclass_ready_nodes gauge
virtpod_providerclass_ready_nodes{providerclass="cloud-hypervisor"} 0
virtpod_providerclass_ready_nodes{providerclass="qemu"} 1
# HELP virtpod_vms VirtualMachines by status.phase (Unknown before the controller set one).
# TYPE virtpod_vms gauge
virtpod_vms{phase="Failed"} 2
virtpod_vms{phase="Pending"} 0
virtpod_vms{phase="Running"} 1
virtpod_vms{phase="Scheduling"} 0
virtpod_vms{phase="Starting"} 0
virtpod_vms{phase="Stopped"} 0
virtpod_vms{phase="Stopping"} 0
virtpod_vms{phase="Succeeded"} 0
virtpod_vms{phase="Unknown"} 1
# HELP virtpod_fleet_scrape_errors 1 when the last scrape could not list a kind from the cache (its other gauges are then missing), by kind.
# TYPE virtpod_fleet_scrape_errors gauge
virtpod_fleet_scrape_errors{kind="HypervisorNode"} 0
virtpod_fleet_scrape_errors{kind="ProviderClass"} 0
virtpod_fleet_scrape_errors{kind="VirtualMachine"} 0
`
	if err := testutil.CollectAndCompare(fleetmetrics.Collector{Reader: c}, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
