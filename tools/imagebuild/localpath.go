package main

import (
	"fmt"
	"strings"

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
	return prebuiltImageCommand(cmd, localPathLayout, "localhost/virtpod/local-path-provisioner:v0.0.30", "make local-path-provisioner")
}

// prebuiltImageCommand is goImageCommand for programs that are not packages of this module, so
// imagebuild cannot build them itself: every program's flag is required, and its error says
// which make target builds the binary.
func prebuiltImageCommand(cmd *cobra.Command, l imageLayout, defaultTag, makeTarget string) *cobra.Command {
	goImageCommand(cmd, l, defaultTag)
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		for _, p := range l.programs {
			if b, _ := c.Flags().GetString(strings.TrimPrefix(p.flag, "--")); b == "" {
				return fmt.Errorf("%s is required: the %s binary (%s builds it into $VIRTPOD_CACHE)", p.flag, p.what, makeTarget)
			}
		}
		return run(c, args)
	}
	return cmd
}
