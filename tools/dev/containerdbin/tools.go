//go:build tools

// Package containerdbin pins the containerd commands virtpod's local cluster runs.
package containerdbin

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
