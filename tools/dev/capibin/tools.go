//go:build tools

// Package capibin pins the Cluster API core manager, the kubeadm bootstrap provider and clusterctl that virtpod's Cluster API
// provider is tested against.
package capibin

import (
	_ "sigs.k8s.io/cluster-api/bootstrap/kubeadm"
	_ "sigs.k8s.io/cluster-api/cmd/clusterctl"
	_ "sigs.k8s.io/cluster-api/core"
)
