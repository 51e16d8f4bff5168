package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// localPathLayout is the local cluster's storage provisioner: rancher's local-path-provisioner,
// a third-party program built from the Go module proxy by the Makefile (tools/dev/localpathbin),
// so it always comes prebuilt. It runs as nonroot: it only talks to the API server; the helper
// pods it starts (the toolbox image) make and remove the volume folders on the node.
var localPathLayout = imageLayout{
	name: "local-path-provisioner",
	programs: []goProgram{{"local-path-provisioner", "github.com/rancher/local-path-provisioner",
		"/usr/local/bin/local-path-provisioner", "--binary"}},
	entrypoint: "/usr/local/bin/local-path-provisioner",
	user:       "65532:65532",
	base:       true,
}

func newLocalPathCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "local-path-provisioner",
		Short: "The local cluster's storage provisioner image: rancher's local-path-provisioner (--binary, built by make local-path-provisioner)",
		Args:  cobra.NoArgs,
	}
	goImageCommand(cmd, localPathLayout, "localhost/virtpod/local-path-provisioner:v0.0.30")
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		// It is not a package of this module, so imagebuild cannot build it itself.
		if b, _ := c.Flags().GetString("binary"); b == "" {
			return errors.New("--binary is required: the local-path-provisioner binary (make local-path-provisioner builds it into $VIRTPOD_CACHE)")
		}
		return run(c, args)
	}
	return cmd
}
