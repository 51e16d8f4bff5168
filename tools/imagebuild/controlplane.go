package main

import (
	"github.com/spf13/cobra"
)

// tenantControlPlaneLayout is a tenant cluster's control plane as Kamaji runs one in the
// management cluster: etcd, kube-apiserver, kube-controller-manager and kube-scheduler, the
// binaries virtpod already pins and builds (make k8s-binaries), one image for the pod's four
// containers, each naming its own command. They run as nonroot: their state is an emptyDir.
var tenantControlPlaneLayout = imageLayout{
	name: "tenant-control-plane",
	programs: []goProgram{
		{"kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver", "/usr/local/bin/kube-apiserver", "--apiserver-binary"},
		{"kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager", "/usr/local/bin/kube-controller-manager", "--controller-manager-binary"},
		{"kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler", "/usr/local/bin/kube-scheduler", "--scheduler-binary"},
		{"etcd", "go.etcd.io/etcd/server/v3", "/usr/local/bin/etcd", "--etcd-binary"},
	},
	user: "65532:65532",
	base: true,
}

func newTenantControlPlaneCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenant-control-plane",
		Short: "A tenant's hosted control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler; all four binaries prebuilt)",
		Args:  cobra.NoArgs,
	}
	return prebuiltImageCommand(cmd, tenantControlPlaneLayout, "localhost/virtpod/tenant-control-plane:v1.37.2", "make k8s-binaries")
}
