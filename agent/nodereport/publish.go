package nodereport

// Publishing: a node's probe results become the node labels runner pods select on and the
// node's HypervisorNode object. Labels are written and the object created only when they
// change; the status (with its heartbeat) is written once per probe.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Labels are the node labels the probe results give: every key is always set, "true" or "false",
// so a selector can also require the absence of a capability.
func Labels(st vmv1.HypervisorNodeStatus) map[string]string {
	l := map[string]string{
		vmv1.LabelKVM:       strconv.FormatBool(st.KVM.State == vmv1.KVMUsable),
		vmv1.LabelEmulation: strconv.FormatBool(st.Emulation.Available),
	}
	for _, p := range st.Providers {
		l[vmv1.LabelProviderPrefix+string(p.Name)] = strconv.FormatBool(p.Available)
	}
	return l
}

// Publisher writes one node's results.
type Publisher struct {
	Client client.Client
	Node   string
}

// Result says what Publish wrote, for logs and tests.
type Result struct {
	LabelsPatched bool
	Created       bool
}

// Publish brings the node's labels and its HypervisorNode in line with st.
func (p *Publisher) Publish(ctx context.Context, st vmv1.HypervisorNodeStatus) (Result, error) {
	var res Result
	node := &corev1.Node{}
	if err := p.Client.Get(ctx, client.ObjectKey{Name: p.Node}, node); err != nil {
		return res, fmt.Errorf("get node %s: %w", p.Node, err)
	}
	patched, err := p.patchLabels(ctx, node, Labels(st))
	if err != nil {
		return res, err
	}
	res.LabelsPatched = patched
	res.Created, err = p.publishStatus(ctx, node, st)
	return res, err
}

// patchLabels sends a merge patch of only the agent's labels, and only when one differs, so it
// never touches (or races with) labels anyone else owns.
func (p *Publisher) patchLabels(ctx context.Context, node *corev1.Node, want map[string]string) (bool, error) {
	diff := map[string]string{}
	for k, v := range want {
		if node.Labels[k] != v {
			diff[k] = v
		}
	}
	if len(diff) == 0 {
		return false, nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": diff}})
	if err != nil {
		return false, err
	}
	if err := p.Client.Patch(ctx, node, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return false, fmt.Errorf("label node %s: %w", p.Node, err)
	}
	return true, nil
}

// publishStatus creates the HypervisorNode when missing (owned by the Node, so it goes with it),
// then writes the status subresource; the create ignores status, hence the two steps.
func (p *Publisher) publishStatus(ctx context.Context, node *corev1.Node, st vmv1.HypervisorNodeStatus) (bool, error) {
	created := false
	hn := &vmv1.HypervisorNode{}
	err := p.Client.Get(ctx, client.ObjectKey{Name: p.Node}, hn)
	if apierrors.IsNotFound(err) {
		hn = &vmv1.HypervisorNode{ObjectMeta: metav1.ObjectMeta{
			Name: p.Node,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, BlockOwnerDeletion: ptr.To(false),
			}},
		}}
		if err = p.Client.Create(ctx, hn); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("create HypervisorNode %s: %w", p.Node, err)
		}
		created = err == nil
	} else if err != nil {
		return false, fmt.Errorf("get HypervisorNode %s: %w", p.Node, err)
	}
	// A merge patch of the whole status: lists are replaced, so a provider that disappeared goes.
	patch, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return created, err
	}
	if err := p.Client.Status().Patch(ctx, hn, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return created, fmt.Errorf("write HypervisorNode %s status: %w", p.Node, err)
	}
	return created, nil
}
