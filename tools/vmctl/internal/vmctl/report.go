package vmctl

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// report is what `vmctl status` shows. It is its own stable shape (not the API objects), so
// scripts reading -o json do not break when the CRDs grow fields.
type report struct {
	Providers        []providerRow `json:"providers"`
	Nodes            []nodeRow     `json:"nodes"`
	DefaultProvider  string        `json:"defaultProvider"`
	DefaultAvailable bool          `json:"defaultAvailable"`
	// Problem says why the exit code is non-zero; empty when the default class is usable.
	Problem string `json:"problem,omitempty"`
}

// providerRow is one ProviderClass.
type providerRow struct {
	Name           string   `json:"name"`
	Handler        string   `json:"handler"`
	Default        bool     `json:"default"`
	Enabled        bool     `json:"enabled"`
	DisabledReason string   `json:"disabledReason,omitempty"`
	Available      string   `json:"available"` // the Available condition: True, False or Unknown
	Reason         string   `json:"reason,omitempty"`
	Message        string   `json:"message,omitempty"`
	ReadyNodes     int32    `json:"readyNodes"`
	TotalNodes     int32    `json:"totalNodes"`
	Versions       []string `json:"versions"`
	AllowEmulation bool     `json:"allowEmulation"`
}

// nodeRow is one HypervisorNode report.
type nodeRow struct {
	Name            string         `json:"name"`
	KVM             string         `json:"kvm"`
	KVMReason       string         `json:"kvmReason,omitempty"`
	Emulation       bool           `json:"emulation"`
	EmulationReason string         `json:"emulationReason,omitempty"`
	Providers       []nodeProvider `json:"providers"`
	Arch            string         `json:"arch,omitempty"`
	Heartbeat       *time.Time     `json:"heartbeat,omitempty"`
	HeartbeatAge    string         `json:"heartbeatAge"`
	Stale           bool           `json:"stale"`
}

// nodeProvider is one hypervisor on one node: its version, or why it cannot run there.
type nodeProvider struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Version   string `json:"version,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// noStatus is shown when a class has no Available condition yet: only the controller sets it.
const noStatus = "no status yet; is virtpod-controller running?"

// buildReport turns the listed objects into the report. now decides staleness, so tests can
// fix the clock.
func buildReport(classes []vmv1.ProviderClass, nodes []vmv1.HypervisorNode, now time.Time) report {
	r := report{Providers: []providerRow{}, Nodes: []nodeRow{}}
	var defaults []string
	for i := range classes {
		c := &classes[i]
		row := providerRow{
			Name:           c.Name,
			Handler:        string(c.Spec.Handler),
			Default:        c.Annotations[vmv1.AnnotationDefaultClass] == "true",
			Enabled:        c.Spec.Enabled == nil || *c.Spec.Enabled, // the CRD defaults it to true
			AllowEmulation: c.Spec.AllowEmulation,
			ReadyNodes:     c.Status.ReadyNodes,
			TotalNodes:     c.Status.TotalNodes,
			Versions:       append([]string{}, c.Status.Versions...),
			Available:      string(metav1.ConditionUnknown),
			Message:        noStatus,
		}
		if !row.Enabled {
			row.DisabledReason = c.Spec.DisabledReason
		}
		if cond := meta.FindStatusCondition(c.Status.Conditions, vmv1.ConditionAvailable); cond != nil {
			row.Available, row.Reason, row.Message = string(cond.Status), cond.Reason, cond.Message
		}
		if row.Default {
			defaults = append(defaults, c.Name)
		}
		r.Providers = append(r.Providers, row)
	}
	sort.Slice(r.Providers, func(i, j int) bool { return r.Providers[i].Name < r.Providers[j].Name })
	sort.Strings(defaults)

	for i := range nodes {
		r.Nodes = append(r.Nodes, newNodeRow(&nodes[i], now))
	}
	sort.Slice(r.Nodes, func(i, j int) bool { return r.Nodes[i].Name < r.Nodes[j].Name })

	switch len(defaults) {
	case 0:
		r.Problem = fmt.Sprintf("no ProviderClass is marked default (annotation %s=\"true\"); VMs that name no provider cannot start", vmv1.AnnotationDefaultClass)
		if len(classes) == 0 {
			r.Problem = "no ProviderClass exists; is virtpod installed?"
		}
	case 1:
		r.DefaultProvider = defaults[0]
		for _, p := range r.Providers {
			if p.Name != defaults[0] {
				continue
			}
			r.DefaultAvailable = p.Available == string(metav1.ConditionTrue)
			if !r.DefaultAvailable {
				r.Problem = fmt.Sprintf("default provider %s is not available: %s", p.Name, p.Message)
			}
		}
	default:
		// An ambiguous default is reported, not resolved: which one VMs get is the controller's call.
		r.Problem = fmt.Sprintf("%d ProviderClasses are marked default (%s); mark exactly one", len(defaults), strings.Join(defaults, ", "))
	}
	return r
}

func newNodeRow(hv *vmv1.HypervisorNode, now time.Time) nodeRow {
	st := &hv.Status
	row := nodeRow{
		Name:            hv.Name,
		KVM:             string(st.KVM.State),
		Emulation:       st.Emulation.Available,
		EmulationReason: st.Emulation.Reason,
		Arch:            st.Arch,
		Providers:       []nodeProvider{},
	}
	if row.KVM == "" {
		row.KVM = "Unknown" // an agent that has not probed yet
	}
	if st.KVM.State != vmv1.KVMUsable {
		row.KVMReason = st.KVM.Reason
	}
	for _, p := range st.Providers {
		np := nodeProvider{Name: string(p.Name), Available: p.Available, Version: p.Version}
		if !p.Available {
			np.Reason = p.Reason
		}
		row.Providers = append(row.Providers, np)
	}
	sort.Slice(row.Providers, func(i, j int) bool { return row.Providers[i].Name < row.Providers[j].Name })
	if st.HeartbeatTime.IsZero() {
		row.HeartbeatAge, row.Stale = "never", true
		return row
	}
	hb := st.HeartbeatTime.UTC()
	row.Heartbeat = &hb
	age := now.Sub(hb)
	if age < 0 {
		age = 0 // clock skew between the agent's node and this machine
	}
	row.HeartbeatAge = duration.HumanDuration(age)
	// Same threshold the class status uses, so "stale" here matches the class's counts.
	row.Stale = age > vmv1.ReportStaleAfter
	return row
}
