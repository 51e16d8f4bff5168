package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// uninstall removes virtpod as docs/install.md says, after every test, and checks it leaves
// nothing behind: no VM, pod, DaemonSet or namespace of virtpod's, no CRD, role, webhook policy
// or node label of virtpod's. TestMain fails the run when it does not.
func uninstall() error {
	ctx := context.Background()
	steps := [][]string{
		// 1. The VMs, while the controller runs: their guests shut down, their pods go.
		{"delete", "virtualmachines", "--all", "--all-namespaces", "--wait", "--timeout=3m"},
		// 2. Everything the release installed, CRDs last (kubectl deletes in file order).
		{"delete", "-f", filepath.Join(release, installedFile), "--ignore-not-found", "--wait", "--timeout=3m"},
		// 3. The labels the node agent put on nodes.
		{"label", "nodes", "--all", "virtpod.io/kvm-", "virtpod.io/emulation-", "provider.virtpod.io/qemu-", "provider.virtpod.io/cloud-hypervisor-"},
	}
	for _, s := range steps {
		if out, err := run(s...); err != nil {
			return fmt.Errorf("kubectl %s: %v\n%s", strings.Join(s, " "), err, out)
		}
	}
	var left []string
	if _, err := kubeset.CoreV1().Namespaces().Get(ctx, "virtpod-system", metav1.GetOptions{}); err == nil {
		left = append(left, "namespace virtpod-system")
	}
	ds, err := kubeset.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, d := range ds.Items {
		left = append(left, "DaemonSet "+d.Namespace+"/"+d.Name)
	}
	pods, err := kubeset.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "vm.virtpod.io/name"})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		left = append(left, "runner pod "+p.Namespace+"/"+p.Name)
	}
	// Names across kinds: anything cluster-scoped that still says virtpod.
	for _, kind := range []string{"crd", "clusterrole", "clusterrolebinding", "validatingadmissionpolicy", "validatingadmissionpolicybinding"} {
		out, err := run("get", kind, "-o", "name")
		if err != nil {
			return fmt.Errorf("kubectl get %s: %v\n%s", kind, err, out)
		}
		for _, n := range strings.Fields(out) {
			if strings.Contains(n, "virtpod") {
				left = append(left, n)
			}
		}
	}
	nodes, err := kubeset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		for k := range n.Labels {
			if strings.Contains(k, "virtpod.io/") {
				left = append(left, "label "+k+" on node "+n.Name)
			}
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("uninstall left: %s", strings.Join(left, "; "))
	}
	return nil
}
