// Package providerclass keeps each ProviderClass's status: on how many nodes its hypervisor can
// run now, which versions, and, when none, why — from the node agents' HypervisorNode reports.
package providerclass

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Why a node cannot run a class's VMs, in the words a summary uses.
const (
	notFresh       = "with a stale report (is the node agent running?)"
	notSelected    = "excluded by the class's nodeSelector"
	lacksProvider  = "without %s"
	noAcceleration = "without usable KVM"
	noEmulation    = "without emulation"
)

// nodeFit says whether a node can run VMs of the class with the given acceleration ("" for
// any the class allows), and if not, why. A nil node object means the Node is gone.
func nodeFit(class *vmv1.ProviderClass, accel vmv1.Acceleration, hv *vmv1.HypervisorNode, node *corev1.Node, now time.Time) (bool, string, string) {
	if node == nil || hv.Status.Stale(now) {
		return false, notFresh, ""
	}
	if s := class.Spec.Scheduling; s != nil && len(s.NodeSelector) > 0 &&
		!labels.SelectorFromSet(s.NodeSelector).Matches(labels.Set(node.Labels)) {
		return false, notSelected, ""
	}
	var version string
	found := false
	for _, p := range hv.Status.Providers {
		if p.Name == class.Spec.Handler && p.Available {
			found, version = true, p.Version
		}
	}
	if !found {
		return false, fmt.Sprintf(lacksProvider, class.Spec.Handler), ""
	}
	kvmUsable, _ := hv.Status.KVMUsableAt(now)
	emulation := class.Spec.AllowEmulation && hv.Status.Emulation.Available
	switch accel {
	case vmv1.AccelerationKVM:
		if kvmUsable {
			return true, "", version
		}
	case vmv1.AccelerationEmulated:
		if emulation {
			return true, "", version
		}
		if class.Spec.AllowEmulation {
			return false, noEmulation, ""
		}
	default: // any way the class allows
		if kvmUsable || emulation {
			return true, "", version
		}
	}
	return false, noAcceleration, ""
}

// Fit is how many nodes can run VMs of a class, and why the others cannot.
type Fit struct {
	Ready, Total int
	Versions     []string
	Reasons      map[string]int // why-not → nodes
}

// Summary reads like the scheduler's, with virtpod's reasons: "0/4 nodes fit: 2 without
// cloud-hypervisor, 1 without usable KVM, 1 excluded by the class's nodeSelector".
func (f Fit) Summary() string {
	if f.Total == 0 {
		return "no node agent has reported; is the virtpod-agent DaemonSet running?"
	}
	s := fmt.Sprintf("%d/%d nodes fit", f.Ready, f.Total)
	if len(f.Reasons) == 0 {
		return s
	}
	keys := make([]string, 0, len(f.Reasons))
	for r := range f.Reasons {
		keys = append(keys, r)
	}
	// Most nodes first, then by reason, so the same cluster always reads the same.
	sort.Slice(keys, func(i, j int) bool {
		if f.Reasons[keys[i]] != f.Reasons[keys[j]] {
			return f.Reasons[keys[i]] > f.Reasons[keys[j]]
		}
		return keys[i] < keys[j]
	})
	reasons := make([]string, len(keys))
	for i, r := range keys {
		reasons[i] = fmt.Sprintf("%d %s", f.Reasons[r], r)
	}
	return s + ": " + strings.Join(reasons, ", ")
}

// Evaluate fits a class against every reporting node, for VMs with the given acceleration.
func Evaluate(class *vmv1.ProviderClass, accel vmv1.Acceleration, hvs []vmv1.HypervisorNode, nodes map[string]*corev1.Node, now time.Time) Fit {
	f := Fit{Total: len(hvs), Reasons: map[string]int{}}
	seen := map[string]bool{}
	for i := range hvs {
		ok, why, version := nodeFit(class, accel, &hvs[i], nodes[hvs[i].Name], now)
		if !ok {
			f.Reasons[why]++
			continue
		}
		f.Ready++
		if version != "" && !seen[version] {
			seen[version] = true
			f.Versions = append(f.Versions, version)
		}
	}
	sort.Strings(f.Versions)
	return f
}
