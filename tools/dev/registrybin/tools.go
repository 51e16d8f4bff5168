//go:build tools

// Package registrybin pins the OCI registry (CNCF distribution) the local cluster runs, built
// from the Go module proxy like the other third-party components.
package registrybin

import (
	_ "github.com/distribution/distribution/v3/cmd/registry"
)
