package main

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"

	"github.com/virtpod/virtpod/tools/dev/localpath"
)

// The storage provisioner's image and the busybox its helper pods run (make images builds
// both), and the folder under the cluster's where its volumes live.
const (
	localPathImage = "localhost/virtpod/local-path-provisioner:v0.0.30"
	toolboxImage   = "localhost/virtpod/toolbox:dev"
	localPathDir   = "local-path"
)

// storage installs the cluster's default StorageClass: a real dynamic provisioner, whose
// volumes are folders under the cluster's own folder (down removes them).
func (c *cluster) storage(ctx context.Context, admin kubernetes.Interface) error {
	fmt.Println("  starting local-path-provisioner (default StorageClass local-path)")
	return localpath.Install(ctx, admin, localpath.Options{
		Image: localPathImage, HelperImage: toolboxImage, Path: c.path(localPathDir),
	})
}
