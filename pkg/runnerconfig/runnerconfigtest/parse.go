// Package runnerconfigtest reads runner flags back into a Config the way virtpod-runner does
// (Bind, then Defaults, then Validate), for tests that check what the controller renders.
// The runner itself binds the flags onto its own command line beside its other options.
package runnerconfigtest

import (
	"flag"
	"fmt"
	"io"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// Parse reads runner flags into a Config, applies defaults and validates it; anything that is
// not a configuration flag is an error.
func Parse(args []string) (runnerconfig.Config, error) {
	var c runnerconfig.Config
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Bind(fs)
	if err := fs.Parse(args); err != nil {
		return runnerconfig.Config{}, err
	}
	if fs.NArg() > 0 {
		return runnerconfig.Config{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	c.Defaults()
	return c, c.Validate()
}
