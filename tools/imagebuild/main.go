// Command imagebuild builds virtpod's container images from files on this machine, without
// Docker or any container engine, and writes each as an image archive that
// `ctr -n k8s.io images import` accepts: the runner (runner binary + Debian's QEMU with its
// libraries and firmware), the controller, the cluster's pause image, a busybox toolbox for
// end-to-end tests, and VM images (kernel / initrd / root disk). See docs/images.md.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"

	"github.com/virtpod/virtpod/pkg/image/ociimage"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "imagebuild",
		Short:         "Build virtpod's container images without a container engine",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunnerCommand(), newControllerCommand(), newPauseCommand(), newToolboxCommand(), newVMCommand(), newLocalPathCommand(), newCoreDNSCommand(), newTenantControlPlaneCommand(), newPushCommand())
	return root
}

// output is where an image goes: the archive file, and optionally containerd.
type output struct {
	tag, out          string
	importIt          bool
	containerdAddress string
	ctr               string
}

func addOutputFlags(cmd *cobra.Command, defaultTag string) *output {
	o := &output{}
	f := cmd.Flags()
	f.StringVar(&o.tag, "tag", defaultTag, "image name the archive carries, as pods refer to it")
	f.StringVar(&o.out, "out", "", "image archive to write (required)")
	f.BoolVar(&o.importIt, "import", false, "after writing, import the archive into containerd's k8s.io namespace with ctr")
	f.StringVar(&o.containerdAddress, "containerd-address", "/run/containerd/containerd.sock", "containerd socket for --import")
	f.StringVar(&o.ctr, "ctr", "ctr", "ctr binary for --import")
	return o
}

// check fails before any building when the flags cannot work.
func (o *output) check() error {
	if o.out == "" {
		return errors.New("--out is required: pass the archive to write, e.g. --out=runner.tar")
	}
	if !o.importIt {
		return nil
	}
	path, err := exec.LookPath(o.ctr)
	if err != nil {
		return fmt.Errorf("--ctr: %s not found: pass --ctr=PATH to the cluster's ctr (the local cluster keeps it in $VIRTPOD_CACHE/containerd-*/ctr)", o.ctr)
	}
	o.ctr = path
	if fi, err := os.Stat(o.containerdAddress); err != nil || fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("--containerd-address: %s is not a socket: start containerd (the local cluster) or pass its socket", o.containerdAddress)
	}
	return nil
}

// write writes the archive, reports it, and imports it when asked.
func (o *output) write(img v1.Image) error {
	if err := ociimage.WriteArchive(o.out, o.tag, img); err != nil {
		return err
	}
	id, err := img.ConfigName()
	if err != nil {
		return err
	}
	fi, err := os.Stat(o.out)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: %s, id %s, %.1f MiB\n", o.out, o.tag, id, float64(fi.Size())/(1<<20))
	if !o.importIt {
		return nil
	}
	cmd := exec.Command(o.ctr, "-a", o.containerdAddress, "-n", "k8s.io", "images", "import", "--all-platforms", o.out)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("--import: %s: %w (the archive is kept at %s)", cmd, err, o.out)
	}
	return nil
}
