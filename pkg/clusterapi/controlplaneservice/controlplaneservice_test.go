package controlplaneservice_test

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	"github.com/virtpod/virtpod/pkg/clusterapi/controlplaneservice"
	goldenfile "github.com/virtpod/virtpod/tests/golden"
)

func cluster() *infrav1.VirtPodCluster {
	return &infrav1.VirtPodCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "alpha", UID: "7d1c0e55-aaaa-bbbb-cccc-ddddeeeeffff"}}
}

func TestGolden(t *testing.T) {
	cases := map[string]struct {
		mutate    func(*infrav1.VirtPodCluster)
		clusterIP string
	}{
		"default-clusterip": {mutate: func(*infrav1.VirtPodCluster) {}},
		"loadbalancer-template": {mutate: func(vc *infrav1.VirtPodCluster) {
			vc.Spec.ControlPlaneService = infrav1.ControlPlaneService{Type: corev1.ServiceTypeLoadBalancer,
				Labels: map[string]string{"team": "infra", "cluster.x-k8s.io/cluster-name": "spoofed"}, Annotations: map[string]string{"lb.example.com/internal": "true"}}
		}},
		"recreated-at-published-ip": {mutate: func(*infrav1.VirtPodCluster) {}, clusterIP: "10.96.0.42"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			vc := cluster()
			c.mutate(vc)
			raw, err := json.Marshal(controlplaneservice.Build(vc, "alpha-cluster", c.clusterIP))
			if err != nil {
				t.Fatal(err)
			}
			out, err := yaml.JSONToYAML(raw)
			if err != nil {
				t.Fatal(err)
			}
			goldenfile.Check(t, name+".yaml", out)
		})
	}
}

func TestName(t *testing.T) {
	if got := controlplaneservice.Name("alpha"); got != "alpha-control-plane" {
		t.Errorf("Name(alpha) = %q", got)
	}
	long := strings.Repeat("a", 60)
	got := controlplaneservice.Name(long)
	if len(got) > 63 || !strings.HasSuffix(got, "-control-plane") || got == controlplaneservice.Name(long+"b") {
		t.Errorf("Name(60×a) = %q (%d chars): want ≤63, the suffix, and distinct from a longer name's", got, len(got))
	}
}

func TestEndpoint(t *testing.T) {
	cases := []struct {
		svc     corev1.Service
		want    clusterv1.APIEndpoint
		waiting string
	}{
		{svc: corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10"}},
			want: clusterv1.APIEndpoint{Host: "10.96.0.10", Port: 6443}},
		{svc: corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.11"}},
			want: clusterv1.APIEndpoint{Host: "10.96.0.11", Port: 6443}},
		{svc: corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.12"}},
			waiting: "load balancer"},
		{svc: corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.12"},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{Hostname: "lb.example.com"}}}}},
			want: clusterv1.APIEndpoint{Host: "lb.example.com", Port: 6443}},
		{svc: corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}, waiting: "cluster IP"},
	}
	for _, c := range cases {
		got, why := controlplaneservice.Endpoint(&c.svc)
		if got != c.want || (c.waiting == "") != (why == "") || !strings.Contains(why, c.waiting) {
			t.Errorf("%s %+v: got %v %q, want %v waiting %q", c.svc.Spec.Type, c.svc.Status, got, why, c.want, c.waiting)
		}
	}
}

func TestPublishedClusterIP(t *testing.T) {
	vc := cluster()
	vc.Status.ServiceEndpoint = clusterv1.APIEndpoint{Host: "10.96.0.42", Port: 6443}
	if got := controlplaneservice.PublishedClusterIP(vc); got != "10.96.0.42" {
		t.Errorf("ClusterIP cluster: %q", got)
	}
	vc.Spec.ControlPlaneService.Type = corev1.ServiceTypeLoadBalancer
	if got := controlplaneservice.PublishedClusterIP(vc); got != "" {
		t.Errorf("LoadBalancer cluster pins %q: its endpoint is the ingress, not a cluster IP", got)
	}
	vc.Spec.ControlPlaneService.Type = ""
	vc.Status.ServiceEndpoint.Host = "lb.example.com"
	if got := controlplaneservice.PublishedClusterIP(vc); got != "" {
		t.Errorf("hostname endpoint pins %q", got)
	}
}
