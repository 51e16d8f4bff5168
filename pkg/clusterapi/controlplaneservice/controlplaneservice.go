// Package controlplaneservice builds the Service in front of a Cluster API cluster's
// control-plane VMs and reads the control-plane endpoint from it. Pure: no API calls.
package controlplaneservice

import (
	"crypto/sha256"
	"encoding/hex"
	"net"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Port is the Kubernetes API server's port, on the Service and on the control-plane VMs.
const Port = 6443

// suffix makes the Service name say what it is.
const suffix = "-control-plane"

// Name is the Service's name: <virtpodcluster>-control-plane, shortened with a hash when that
// would exceed the 63 characters a Service name may have.
func Name(cluster string) string {
	if len(cluster)+len(suffix) <= 63 {
		return cluster + suffix
	}
	sum := sha256.Sum256([]byte(cluster))
	keep := 63 - len(suffix) - 9
	return cluster[:keep] + "-" + hex.EncodeToString(sum[:4]) + suffix
}

// Selector selects the runner pods of the cluster's control-plane machines: virtpod's own pods
// labelled by Cluster API (Machine → VirtPodMachine → VirtualMachine → pod).
func Selector(clusterName string) map[string]string {
	return map[string]string{
		vmv1.LabelManagedBy:       vmv1.ManagedBy,
		infrav1.ClusterNameLabel:  clusterName,
		infrav1.ControlPlaneLabel: "",
	}
}

// Build is the apply configuration of the Service for vc, which belongs to the Cluster API
// Cluster clusterName. Applied with server-side apply, so labels and annotations dropped from the
// template are dropped from the Service, and fields the API server fills in (nodePort) are left
// alone. clusterIP, when not empty, asks for that cluster IP: a Service re-created after a
// deletion keeps the address of the endpoint already published, which Cluster API copied into
// the Cluster, where it cannot change.
func Build(vc *infrav1.VirtPodCluster, clusterName, clusterIP string) *corev1ac.ServiceApplyConfiguration {
	t := vc.Spec.ControlPlaneService
	typ := t.Type
	if typ == "" {
		typ = corev1.ServiceTypeClusterIP
	}
	labels := map[string]string{}
	for k, v := range t.Labels {
		labels[k] = v
	}
	labels[vmv1.LabelManagedBy] = vmv1.ManagedBy
	labels[infrav1.ClusterNameLabel] = clusterName
	svc := corev1ac.Service(Name(vc.Name), vc.Namespace).
		WithLabels(labels).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(infrav1.GroupVersion.String()).WithKind("VirtPodCluster").
			WithName(vc.Name).WithUID(vc.UID).WithController(true).WithBlockOwnerDeletion(true)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(typ).
			WithSelector(Selector(clusterName)).
			WithPorts(corev1ac.ServicePort().
				WithName("kube-apiserver").WithProtocol(corev1.ProtocolTCP).
				WithPort(Port).WithTargetPort(intstr.FromInt32(Port))))
	if len(t.Annotations) > 0 {
		svc.WithAnnotations(t.Annotations)
	}
	if clusterIP != "" {
		svc.Spec.WithClusterIP(clusterIP)
	}
	return svc
}

// PublishedClusterIP is the cluster IP in the endpoint virtpod published, if it may have come
// from a cluster IP (not from a load balancer's ingress).
func PublishedClusterIP(vc *infrav1.VirtPodCluster) string {
	ep := vc.Status.ServiceEndpoint
	if vc.Spec.ControlPlaneService.Type == corev1.ServiceTypeLoadBalancer || ep.Port != Port || net.ParseIP(ep.Host) == nil {
		return ""
	}
	return ep.Host
}

// Endpoint is the control-plane endpoint the Service offers, and why not when it offers none
// yet: a LoadBalancer's first ingress, otherwise the cluster IP, on port 6443.
func Endpoint(svc *corev1.Service) (clusterv1.APIEndpoint, string) {
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for _, in := range svc.Status.LoadBalancer.Ingress {
			host := in.IP
			if host == "" {
				host = in.Hostname
			}
			if host != "" {
				return clusterv1.APIEndpoint{Host: host, Port: Port}, ""
			}
		}
		return clusterv1.APIEndpoint{}, "waiting for a load balancer to give Service " + svc.Name + " an ingress address"
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return clusterv1.APIEndpoint{}, "waiting for Service " + svc.Name + " to get a cluster IP"
	}
	return clusterv1.APIEndpoint{Host: svc.Spec.ClusterIP, Port: Port}, ""
}
