//go:build tools

// Package localpathbin pins rancher's local-path-provisioner, the local cluster's dynamic
// provisioner (its default StorageClass), built from the Go module proxy like the other
// third-party components.
package localpathbin

import (
	_ "github.com/rancher/local-path-provisioner"
)
