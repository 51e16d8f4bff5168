// Package runnerconfigtest reads runner flags back into a Config the way virtpod-runner does
// (Bind, then Defaults, then Validate), for tests that check what the controller renders.
// The runner itself binds the flags onto its own command line beside its other options.
package runnerconfigtest

import "github.com/virtpod/virtpod/pkg/runnerconfig"

// Parse is runnerconfig.Parse.
func Parse(args []string) (runnerconfig.Config, error) { return runnerconfig.Parse(args) }
