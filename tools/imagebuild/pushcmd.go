package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/virtpod/virtpod/tools/imagebuild/push"
)

func newPushCommand() *cobra.Command {
	var o push.Options
	var dir, lock string
	cmd := &cobra.Command{
		Use:   "push [ARCHIVE[=PATH]...]",
		Short: "Push image archives (or every *.tar of --dir) to a registry and print each image by digest",
		Long: "Each image goes to REGISTRY/PATH, PATH being its archive tag's path (localhost/virtpod/runner:dev -> REGISTRY/virtpod/runner) or the one given as ARCHIVE=PATH, " +
			"tagged with its archive tag, or with --version and the label " + push.VersionLabel + "=VERSION. --lock writes where each went, by digest.",
	}
	f := cmd.Flags()
	f.StringVar(&o.Registry, "registry", "", "registry as HOST[:PORT][/PREFIX] (required)")
	f.BoolVar(&o.Insecure, "insecure", false, "plain HTTP, for a registry on a local address")
	f.StringVar(&o.Version, "version", "", "tag every image VERSION and label it so (a release), instead of keeping its archive tag")
	f.StringVar(&dir, "dir", "", "push every image archive (*.tar) in this folder too")
	f.StringVar(&lock, "lock", "", "write the pushed images by digest to this JSON file")
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		archives := args
		if dir != "" {
			tars, err := push.Dir(dir)
			if err != nil {
				return err
			}
			archives = append(archives, tars...)
		}
		if len(archives) == 0 {
			return fmt.Errorf("nothing to push: name archives, or --dir with *.tar files in it (make images builds them)")
		}
		pushed, err := push.Archives(o, archives...)
		if err != nil {
			return err
		}
		for _, p := range pushed {
			fmt.Printf("pushed %s as %s\n  %s\n", p.Source, p.Tag, p.Digest)
		}
		if lock == "" {
			return nil
		}
		l, err := push.NewLock(pushed)
		if err != nil {
			return err
		}
		return push.WriteLock(lock, l)
	}
	return cmd
}
