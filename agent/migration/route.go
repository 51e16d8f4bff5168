package migration

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/virtpod/virtpod/agent/podcontrol"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// The agents' pods (config/agent/daemonset.yaml): this label, in the agents' namespace, with
// the receiver's container port named AgentPortName.
const (
	AgentLabel    = "app.kubernetes.io/name"
	AgentName     = "virtpod-agent"
	AgentPortName = "migration"
)

// route is where the source pod's stream goes: the agent of the node its migration's target
// pod runs on, and that pod's UID. Everything comes from the API — the migration names the
// target pod, the target pod its node, and the agents' own namespace (where only the admin
// makes pods) the agent pod on that node and its IP, which is what the target agent writes
// as migration-receiver. That pod IP is narrower than the node's InternalIP: the agent is not
// on the host network, and a node address reaches any hostPort there. migrate-to, which
// anyone who may patch the pod can write, must say the same, or the send is refused: it
// chooses nothing.
func (e *Executor) route(ctx context.Context, pod *corev1.Pod, o podcontrol.Owner, to string) (addr, target string, err error) {
	asked, uid, err := parseMigrateTo(to)
	if err != nil {
		return "", "", permanent{err}
	}
	mig := o.Migration
	if mig == nil || mig.Status.TargetPod == "" {
		return "", "", permanent{fmt.Errorf("no live VirtualMachineMigration of VirtualMachine %s names pod %s as its source and a target pod: %s refused", o.VM.Name, pod.Name, vmv1.AnnotationMigrateTo)}
	}
	tp, err := e.Client.CoreV1().Pods(pod.Namespace).Get(ctx, mig.Status.TargetPod, metav1.GetOptions{})
	if err != nil {
		return "", "", fmt.Errorf("target pod %s of migration %s: %w", mig.Status.TargetPod, mig.Name, err)
	}
	ref := metav1.GetControllerOf(tp)
	switch {
	case string(tp.UID) != uid:
		return "", "", permanent{fmt.Errorf("%s names pod UID %s, but migration %s's target pod %s is %s: refused", vmv1.AnnotationMigrateTo, uid, mig.Name, tp.Name, tp.UID)}
	case ref == nil || ref.UID != o.VM.UID || tp.Annotations[vmv1.AnnotationMigration] != string(mig.UID):
		return "", "", permanent{fmt.Errorf("pod %s is not VirtualMachine %s's target of migration %s: refused", tp.Name, o.VM.Name, mig.Name)}
	case tp.Spec.NodeName == "":
		return "", "", fmt.Errorf("target pod %s has no node yet", tp.Name)
	}
	agents, err := e.Client.CoreV1().Pods(e.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", tp.Spec.NodeName).String(),
		LabelSelector: labels.SelectorFromSet(labels.Set{AgentLabel: AgentName}).String(),
	})
	if err != nil {
		return "", "", fmt.Errorf("the agent of node %s: %w", tp.Spec.NodeName, err)
	}
	var found []string
	for _, a := range agents.Items {
		if a.DeletionTimestamp != nil || a.Status.Phase != corev1.PodRunning || a.Status.PodIP == "" {
			continue
		}
		found = append(found, net.JoinHostPort(a.Status.PodIP, strconv.Itoa(agentPort(&a))))
	}
	for _, f := range found {
		if sameAddr(f, asked) {
			return f, uid, nil
		}
	}
	if len(found) == 0 {
		return "", "", fmt.Errorf("no running agent pod on node %s in namespace %s", tp.Spec.NodeName, e.Namespace)
	}
	return "", "", permanent{fmt.Errorf("%s names %s, but the agent of target node %s is at %s: refused", vmv1.AnnotationMigrateTo, asked, tp.Spec.NodeName, strings.Join(found, ", "))}
}

// agentPort is the agent pod's receiver port as its spec declares it.
func agentPort(p *corev1.Pod) int {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == AgentPortName && port.Protocol != corev1.ProtocolUDP {
				return int(port.ContainerPort)
			}
		}
	}
	return DefaultPort
}

// sameAddr compares two ip:port strings as addresses (an IPv6 address has many spellings).
func sameAddr(a, b string) bool {
	pa, errA := netip.ParseAddrPort(a)
	pb, errB := netip.ParseAddrPort(b)
	return errA == nil && errB == nil && pa.Addr().Unmap() == pb.Addr().Unmap() && pa.Port() == pb.Port()
}
