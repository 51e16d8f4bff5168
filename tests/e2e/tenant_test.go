package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/capimanager"
)

// nodeImage is the Kubernetes node image (make node-image): the Debian guest with containerd,
// runc, the CNI plugins, kubelet and kubeadm, its disk at /disk/node.qcow2.
const nodeImage = "localhost/virtpod/node:v1.37.2"

// workerVM is the workers' VM: the node image through its own bootloader and UEFI, emulated,
// Ready once the bootstrap's web service answers.
func workerVM(ns string) vmv1.VirtualMachineSpec {
	vm := newVM(ns, "worker")
	g := &vm.Spec.Guest
	g.KernelImage, g.Firmware = "", vmv1.FirmwareUEFI
	g.Memory = resource.MustParse("1Gi")
	g.RootDisk = vmv1.RootDisk{Image: nodeImage}
	g.Ports = []vmv1.Port{{Name: "ssh", Port: 22}, {Name: "http", Port: 8080}}
	g.ReadinessProbe = &vmv1.GuestProbe{HTTPGet: &vmv1.HTTPProbe{Port: 8080, Path: "/index.html"}}
	vm.Spec.TerminationGracePeriodSeconds = ptr.To[int64](60)
	vm.Spec.PodResources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("1280Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1280Mi")},
	}
	return vm.Spec
}

// TestTenantWorkersJoin: a tenant cluster whose control plane is hosted the way Kamaji hosts one
// gets Ready worker Nodes from virtpod VMs through Cluster API's own controllers (the core
// manager and the kubeadm bootstrap provider): a MachineDeployment of one worker boots the node
// image, whose `kubeadm join` registers a real kubelet with the providerID virtpod set, so the
// Machine runs with its nodeRef and addresses; scaled to two, a second Node; scaled to one, Cluster
// API drains the oldest worker's Node and its VM goes; a MachineHealthCheck replaces the worker
// whose guest stopped, and scaled to zero, the replacement goes; a worker of a second
// MachineDeployment, whose join token is broken, says so on its VirtPodMachine; deleting the
// Cluster removes every VM and object virtpod made. At most two worker guests run at a time,
// each booted once. The first worker also carries the checks of a stock-style cloud guest
// (cloudGuestChecks), run while the second boots, and its deletion is seen to power the guest
// off through its agent.
func TestTenantWorkersJoin(t *testing.T) {
	// Cluster API is installed cluster-wide among the sequential tests; the workers then run
	// beside the other parallel tests, in a namespace of their own.
	installClusterAPI(t)
	installKubeadmBootstrap(t)
	parallelLong(t)
	ctx := context.Background()
	ns := namespace(t)
	const name = "tenant"
	began := time.Now()
	cp := hostControlPlane(t, ns, name)
	t.Logf("the tenant's control plane hosted: %s", time.Since(began).Round(time.Second))
	// After a failure too, the Cluster goes while Cluster API's managers still run (they stop
	// after this): its finalizers would otherwise hold the namespace.
	t.Cleanup(func() {
		cl := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if err := kube.Delete(ctx, cl); apierrors.IsNotFound(err) {
			return
		}
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(cl), cl); apierrors.IsNotFound(err) {
				return
			}
		}
	})

	// What a user applies for the workers (cluster-template-kamaji.yaml's shape), timed from here.
	applied := time.Now()
	mustCreate(t, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.ClusterSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "VirtPodCluster", Name: name},
			ControlPlaneRef:   clusterv1.ContractVersionedObjectReference{APIGroup: capimanager.TestControlPlaneGroup, Kind: "TestControlPlane", Name: name}}})
	mustCreate(t, &infrav1.VirtPodMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-md-0"},
		Spec: infrav1.VirtPodMachineTemplateSpec{Template: infrav1.VirtPodMachineTemplateResource{
			Spec: infrav1.VirtPodMachineSpec{VirtualMachine: infrav1.VirtualMachineTemplate{Spec: workerVM(ns)}}}}})
	// The join as the shipped templates have it.
	pub, priv := sshKey(t)
	mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ssh-key"}, Data: map[string][]byte{"id": priv}})
	page := "virtpod tenant worker " + ns
	join := map[string]any{"nodeRegistration": map[string]any{"kubeletExtraArgs": []any{map[string]any{
		"name": "provider-id", "value": "virtpod://" + ns + "/{{ ds.meta_data.local_hostname }}"}}}}
	kubeadmConfigTemplate(t, ns, name+"-md-0", join, pub, page)
	md := machineDeployment(t, ns, name, name+"-md-0", 1)
	sel := md.Spec.Selector.MatchLabels
	// A guest that stops leaves its Node's Ready Unknown once the tenant's controller manager
	// stops hearing from it (20 s here); 10 s more and the Machine is remediated. A Node just
	// joined is Ready=False for a while (its CNI and runtime starting): that must not count.
	mustCreate(t, &clusterv1.MachineHealthCheck{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-md-0"},
		Spec: clusterv1.MachineHealthCheckSpec{ClusterName: name, Selector: metav1.LabelSelector{MatchLabels: sel},
			Checks: clusterv1.MachineHealthCheckChecks{NodeStartupTimeoutSeconds: ptr.To[int32](900),
				UnhealthyNodeConditions: []clusterv1.UnhealthyNodeCondition{
					{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, TimeoutSeconds: ptr.To[int32](10)},
					{Type: corev1.NodeReady, Status: corev1.ConditionFalse, TimeoutSeconds: ptr.To[int32](300)}}}}})

	w := tenantWorkers{t: t, ns: ns, tenant: cp.tenant, sel: sel}
	step := func(what string) { t.Logf("%s: %s after the apply", what, time.Since(applied).Round(time.Second)) }
	scale := func(n int32) {
		t.Helper()
		if err := kube.Patch(ctx, md, client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n))); err != nil {
			t.Fatal(err)
		}
	}
	// Scaled to two once the first worker's guest is starting, so the two boots overlap
	// (emulated, each takes minutes); the first still joins as the only worker of one.
	eventually(t, "the first worker's VM Running", 3*time.Minute, func() error {
		for _, m := range w.machines() {
			vm := &vmv1.VirtualMachine{}
			if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: m.Name}, vm); err == nil && vm.Status.Phase == vmv1.PhaseRunning {
				return nil
			}
		}
		return fmt.Errorf("no worker VM Running yet")
	})
	step("first worker's VM Running")
	scale(2)
	first := w.ready("the first worker's Node Ready in the tenant", 1, 8*time.Minute, 2)
	step("first Node Ready in the tenant")
	w.checkJoined(first[0])
	cloudGuestChecks(t, ns, first[0].Name, "ssh-key", priv, page)
	two := w.ready("a second worker's Node Ready", 2, 8*time.Minute, 2)
	step("second Node Ready")
	// The oldest goes first on the way down (the deletion order); the other stays.
	old, second := two[0], two[1]
	if second.CreationTimestamp.Before(&old.CreationTimestamp) {
		old, second = second, old
	}

	// Scaled to one: the oldest worker's Node is cordoned and drained by Cluster API, then its
	// Machine, VM, pod and Node go. Cluster API chooses it at once; the other worker's guest
	// then stops (vmctl stop, or a guest that powered off), which its Node shows only after the
	// tenant's grace period: its Node goes Unknown and the MachineHealthCheck has Cluster API
	// replace its Machine with a new VM.
	console := followLogs(t, ns, podspec.PodName(old.Name))
	scale(1)
	vm := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: second.Name}}
	if err := kube.Patch(ctx, vm, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"runStrategy":"Halted"}}`))); err != nil {
		t.Fatal(err)
	}
	// With that guest stopped, a worker of a second MachineDeployment boots (still two guests at
	// most): its join names a bootstrap token the tenant does not have (with a short discovery
	// timeout), so it cannot join.
	broken := map[string]any{"discovery": map[string]any{"bootstrapToken": map[string]any{"token": "abcdef.0123456789abcdef"}},
		"timeouts": map[string]any{"discoverySeconds": 10}}
	kubeadmConfigTemplate(t, ns, name+"-md-1", broken, pub, page)
	bad := tenantWorkers{t: t, ns: ns, tenant: cp.tenant, sel: machineDeployment(t, ns, name, name+"-md-1", 1).Spec.Selector.MatchLabels}
	eventually(t, "the oldest worker's tenant Node cordoned", 2*time.Minute, func() error {
		n := &corev1.Node{}
		if err := cp.tenant.Get(ctx, client.ObjectKey{Name: old.Status.NodeRef.Name}, n); err != nil {
			return err
		}
		if !n.Spec.Unschedulable {
			return fmt.Errorf("Node %s schedulable", n.Name)
		}
		return nil
	})
	w.gone("the drained worker's Machine, VM, pod and Node", old, 4*time.Minute)
	poweredOffByAgent(t, <-console)
	step("scaled down to one")
	w.gone("the stopped worker remediated: its Machine, VM, pod and Node", second, 4*time.Minute)
	step("the stopped worker remediated")
	var replacement clusterv1.Machine
	eventually(t, "a replacement Machine with its VM", 2*time.Minute, func() error {
		ms := w.machines()
		if len(ms) != 1 || ms[0].Name == second.Name || ms[0].Name == old.Name {
			return fmt.Errorf("Machines %v", names(ms))
		}
		replacement = ms[0]
		return kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: replacement.Name}, &vmv1.VirtualMachine{})
	})
	step("the replacement's VM made")
	// Scaled to zero: the replacement goes before its guest has done much.
	scale(0)
	eventually(t, "the replacement's Machine and VM gone at zero replicas", 2*time.Minute, func() error {
		if ms := w.machines(); len(ms) > 0 {
			return fmt.Errorf("Machines %v", names(ms))
		}
		if err := kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: replacement.Name}, &vmv1.VirtualMachine{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("VM %s still there (err %v)", replacement.Name, err)
		}
		return nil
	})

	// The broken worker's join fails, and its VirtPodMachine says why, read through the
	// guest's agent (no SSH).
	var failed string
	eventually(t, "the broken join reported on its VirtPodMachine", 6*time.Minute, func() error {
		ms := bad.machines()
		if len(ms) != 1 {
			return fmt.Errorf("Machines %v", names(ms))
		}
		failed = ms[0].Name
		c := bootstrapOf(ns, failed)
		if c == nil || c.Reason != infrav1.ReasonBootstrapFailed {
			return fmt.Errorf("BootstrapSucceeded %+v", c)
		}
		// kubeadm join is the bootstrap's runcmd; its output is on the console the message names.
		if !strings.Contains(c.Message, "runcmd") || !strings.Contains(c.Message, "vmctl console "+failed) {
			t.Fatalf("BootstrapFailed without the failed runcmd and where to read kubeadm's output: %s", c.Message)
		}
		t.Logf("VirtPodMachine %s: %s: %s", failed, c.Reason, c.Message)
		return nil
	})
	step("the broken join reported")

	// The Cluster deleted: nothing virtpod made for it is left, claims included; the control
	// plane's own Deployment stays, as Kamaji's would until its TenantControlPlane goes.
	if err := kube.Delete(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
	defer step("the Cluster deleted")
	eventually(t, "the Cluster and everything virtpod made for it gone", 4*time.Minute, func() error {
		for _, l := range []client.ObjectList{&clusterv1.ClusterList{}, &clusterv1.MachineList{}, &infrav1.VirtPodClusterList{},
			&infrav1.VirtPodMachineList{}, &vmv1.VirtualMachineList{}, &corev1.PersistentVolumeClaimList{}} {
			if err := kube.List(ctx, l, client.InNamespace(ns)); err != nil {
				return err
			}
			if items, err := meta.ExtractList(l); err != nil || len(items) > 0 {
				return fmt.Errorf("%d %T left (%v)", len(items), l, err)
			}
		}
		var pods corev1.PodList
		if err := kube.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if slices.ContainsFunc(p.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "VirtualMachine" }) {
				return fmt.Errorf("runner pod %s left", p.Name)
			}
		}
		var svcs corev1.ServiceList
		if err := kube.List(ctx, &svcs, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(svcs.Items) != 1 {
			return fmt.Errorf("%d Services, want only the tenant API's", len(svcs.Items))
		}
		return nil
	})
}

// tenantWorkers reads a MachineDeployment's workers on both sides: the Machines in the
// management cluster, the Nodes in the tenant.
type tenantWorkers struct {
	t      *testing.T
	ns     string
	tenant client.Client
	sel    map[string]string
}

func (w tenantWorkers) machines() []clusterv1.Machine {
	w.t.Helper()
	var ms clusterv1.MachineList
	if err := kube.List(context.Background(), &ms, client.InNamespace(w.ns), client.MatchingLabels(w.sel)); err != nil {
		w.t.Fatal(err)
	}
	return ms.Items
}

// ready waits until want of the total Machines run, each with a nodeRef to a Node that is Ready
// in the tenant, and returns those.
func (w tenantWorkers) ready(what string, want int, timeout time.Duration, total int) []clusterv1.Machine {
	w.t.Helper()
	var ready []clusterv1.Machine
	eventually(w.t, what, timeout, func() error {
		ms := w.machines()
		if len(ms) != total {
			return fmt.Errorf("%d Machines %v, want %d", len(ms), names(ms), total)
		}
		ready = ready[:0]
		var waiting error
		for _, m := range ms {
			if m.Status.Phase != string(clusterv1.MachinePhaseRunning) || !m.Status.NodeRef.IsDefined() {
				waiting = fmt.Errorf("Machine %s: phase %q, nodeRef %+v (%s)", m.Name, m.Status.Phase, m.Status.NodeRef, bootstrapOf(w.ns, m.Name))
				continue
			}
			n := &corev1.Node{}
			if err := w.tenant.Get(context.Background(), client.ObjectKey{Name: m.Status.NodeRef.Name}, n); err != nil {
				return err
			}
			if c := nodeReady(n); c == nil || c.Status != corev1.ConditionTrue {
				waiting = fmt.Errorf("Node %s not Ready: %+v", n.Name, c)
				continue
			}
			ready = append(ready, m)
		}
		if len(ready) < want {
			return waiting
		}
		return nil
	})
	return ready
}

// checkJoined: the Node is the guest's own kubelet's (the providerID virtpod set, the guest's
// address), and Cluster API and virtpod say so on the Machine and the VirtPodMachine.
func (w tenantWorkers) checkJoined(m clusterv1.Machine) {
	w.t.Helper()
	ctx := context.Background()
	vm := getVM(w.t, w.ns, m.Name)
	n := &corev1.Node{}
	if err := w.tenant.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, n); err != nil {
		w.t.Fatal(err)
	}
	wantID := "virtpod://" + w.ns + "/" + vm.Name
	if n.Name != vm.Name || n.Spec.ProviderID != wantID || m.Spec.ProviderID != wantID {
		w.t.Errorf("Node %s providerID %q, Machine's %q, want Node %s with %q", n.Name, n.Spec.ProviderID, m.Spec.ProviderID, vm.Name, wantID)
	}
	if !slices.ContainsFunc(n.Status.Addresses, func(a corev1.NodeAddress) bool {
		return a.Type == corev1.NodeInternalIP && a.Address == vm.Status.PodIP
	}) {
		w.t.Errorf("Node %s addresses %v, want InternalIP %s (the VM's)", n.Name, n.Status.Addresses, vm.Status.PodIP)
	}
	if !slices.ContainsFunc(m.Status.Addresses, func(a clusterv1.MachineAddress) bool {
		return a.Type == clusterv1.MachineInternalIP && a.Address == vm.Status.PodIP
	}) {
		w.t.Errorf("Machine %s addresses %v, want InternalIP %s", m.Name, m.Status.Addresses, vm.Status.PodIP)
	}
	if n.Status.NodeInfo.KubeletVersion != "v1.37.2" {
		w.t.Errorf("Node %s kubelet %q, want v1.37.2", n.Name, n.Status.NodeInfo.KubeletVersion)
	}
	// The bootstrap's end, read through the guest's agent (no SSH), on the VirtPodMachine.
	eventually(w.t, "VirtPodMachine BootstrapSucceeded", 2*time.Minute, func() error {
		if c := bootstrapOf(w.ns, m.Name); c == nil || c.Status != metav1.ConditionTrue || c.Reason != infrav1.ReasonBootstrapSucceeded {
			return fmt.Errorf("BootstrapSucceeded %+v", c)
		}
		return nil
	})
}

// gone waits until m, its VirtPodMachine, VM and runner pod, and its tenant Node are gone.
func (w tenantWorkers) gone(what string, m clusterv1.Machine, timeout time.Duration) {
	w.t.Helper()
	ctx := context.Background()
	eventually(w.t, what, timeout, func() error {
		for _, o := range []client.Object{&clusterv1.Machine{}, &infrav1.VirtPodMachine{}, &vmv1.VirtualMachine{}} {
			if err := kube.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: m.Name}, o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s still there (err %v)", o, m.Name, err)
			}
		}
		if err := kube.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: podspec.PodName(m.Name)}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("runner pod of %s still there (err %v)", m.Name, err)
		}
		if err := w.tenant.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, &corev1.Node{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("tenant Node %s still there (err %v)", m.Status.NodeRef.Name, err)
		}
		return nil
	})
}

func bootstrapOf(ns, name string) *metav1.Condition {
	vpm := &infrav1.VirtPodMachine{}
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, vpm); err != nil {
		return nil
	}
	return meta.FindStatusCondition(vpm.Status.Conditions, infrav1.BootstrapSucceededCondition)
}

func nodeReady(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func names(ms []clusterv1.Machine) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

// kubeadmConfigTemplate creates the workers' bootstrap template: join as the join
// configuration (the shipped templates' providerID, or a broken one), and what a user adds for a
// cloud guest: a user with an SSH key and a web service (the VM's readiness probe) serving
// page, set up before the join. The web server is the image's busybox: Python's http.server
// takes seconds of the one emulated vCPU to start, in the middle of the join.
func kubeadmConfigTemplate(t *testing.T, ns, name string, join map[string]any, pub, page string) {
	t.Helper()
	kct := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"joinConfiguration": join,
		"users":             []any{map[string]any{"name": "tester", "shell": "/bin/bash", "lockPassword": true, "sshAuthorizedKeys": []any{pub}}},
		"files": []any{
			map[string]any{"path": "/srv/www/index.html", "content": page + "\n"},
			map[string]any{"path": "/etc/systemd/system/virtpod-web.service", "content": "[Unit]\nDescription=virtpod e2e web service\n" +
				"[Service]\nExecStart=/bin/busybox httpd -f -p 8080 -h /srv/www\n[Install]\nWantedBy=multi-user.target\n"}},
		"preKubeadmCommands": []any{"systemctl daemon-reload", "systemctl enable --now virtpod-web.service"},
	}}}}}
	kct.SetAPIVersion("bootstrap.cluster.x-k8s.io/v1beta2")
	kct.SetKind("KubeadmConfigTemplate")
	kct.SetNamespace(ns)
	kct.SetName(name)
	mustCreate(t, kct)
}

// machineDeployment creates a MachineDeployment of cluster's workers, named name, of the
// VirtPodMachineTemplate <cluster>-md-0 and the KubeadmConfigTemplate of its own name.
func machineDeployment(t *testing.T, ns, cluster, name string, replicas int32) *clusterv1.MachineDeployment {
	t.Helper()
	sel := map[string]string{clusterv1.ClusterNameLabel: cluster, clusterv1.MachineDeploymentNameLabel: name}
	md := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.MachineDeploymentSpec{ClusterName: cluster, Replicas: ptr.To(replicas),
			Selector: metav1.LabelSelector{MatchLabels: sel},
			Deletion: clusterv1.MachineDeploymentDeletionSpec{Order: clusterv1.OldestMachineSetDeletionOrder},
			// What Cluster API's webhook (not installed here) defaults.
			Rollout: clusterv1.MachineDeploymentRolloutSpec{Strategy: clusterv1.MachineDeploymentRolloutStrategy{
				Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
				RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{
					MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}}},
			Template: clusterv1.MachineTemplateSpec{ObjectMeta: clusterv1.ObjectMeta{Labels: sel},
				Spec: clusterv1.MachineSpec{ClusterName: cluster, Version: "v1.37.2",
					Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KubeadmConfigTemplate", Name: name}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: infrav1.GroupVersion.Group, Kind: "VirtPodMachineTemplate", Name: cluster + "-md-0"}}}}}
	mustCreate(t, md)
	return md
}
