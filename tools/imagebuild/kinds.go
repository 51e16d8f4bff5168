package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/virtpod/virtpod/pkg/image/ociimage"
	"github.com/virtpod/virtpod/pkg/image/vmimage"
	"github.com/virtpod/virtpod/tools/imagebuild/elfdeps"
)

const busyboxBinary = "/bin/busybox"

func newRunnerCommand() *cobra.Command {
	var withoutHypervisor bool
	var qemuRoot string
	cmd := &cobra.Command{
		Use:   "runner",
		Short: "The runner image: virtpod-runner, virtpod-agent, qemu-system-x86_64 and qemu-img from this machine (or --qemu-root) with their libraries and firmware",
		Args:  cobra.NoArgs,
	}
	o := addOutputFlags(cmd, "localhost/virtpod/runner:dev")
	prebuilt := runnerLayout.flags(cmd)
	cmd.Flags().BoolVar(&withoutHypervisor, "without-hypervisor", false, "leave out qemu-system-x86_64, its modules and firmware (tests the runner's \"provider binary not found\")")
	cmd.Flags().StringVar(&qemuRoot, "qemu-root", "", "take QEMU, its libraries, modules and firmware from this root tree of another Debian instead of this machine (make qemu-next builds Debian 13's QEMU 10.0 in $VIRTPOD_CACHE/qemu-next/root)")
	cmd.RunE = func(*cobra.Command, []string) error {
		if err := o.check(); err != nil {
			return err
		}
		if qemuRoot != "" && !filepath.IsAbs(qemuRoot) {
			return fmt.Errorf("--qemu-root %q: give an absolute path", qemuRoot)
		}
		img, err := goImage(runnerLayout, prebuilt, func() (*ociimage.Layer, error) {
			l, err := qemuLayer(!withoutHypervisor, qemuRoot)
			if err != nil {
				return nil, err
			}
			return l, addBusybox(l, busyboxBinary, devLoopApplets)
		})
		if err != nil {
			return err
		}
		if img, err = withFeatures(img, runnerFeatures(!withoutHypervisor, qemuRoot)); err != nil {
			return err
		}
		return o.write(img)
	}
	return cmd
}

func newControllerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "The controller image: virtpod-controller, running as user 65532",
		Args:  cobra.NoArgs,
	}
	return goImageCommand(cmd, controllerLayout, "localhost/virtpod/controller:dev")
}

func newPauseCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pause",
		Short: "The sandbox (pause) image: a static /pause that waits for SIGTERM",
		Args:  cobra.NoArgs,
	}
	return goImageCommand(cmd, pauseLayout, "localhost/virtpod/pause:3.10")
}

// goImageCommand makes cmd build the image of l, which holds only its Go programs.
func goImageCommand(cmd *cobra.Command, l imageLayout, defaultTag string) *cobra.Command {
	o := addOutputFlags(cmd, defaultTag)
	prebuilt := l.flags(cmd)
	cmd.RunE = func(*cobra.Command, []string) error {
		if err := o.check(); err != nil {
			return err
		}
		img, err := goImage(l, prebuilt, nil)
		if err != nil {
			return err
		}
		return o.write(img)
	}
	return cmd
}

// goImage is the image of l: the base layer if l has one, then the layer system makes (nil:
// none), then the Go programs, which change most often, so the layers below them are reused.
func goImage(l imageLayout, prebuilt []string, system func() (*ociimage.Layer, error)) (v1.Image, error) {
	dir, err := os.MkdirTemp("", "imagebuild-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	programs, err := l.layers(prebuilt, dir)
	if err != nil {
		return nil, err
	}
	var layers []*ociimage.Layer
	if l.base {
		base, err := baseLayer()
		if err != nil {
			return nil, err
		}
		layers = append(layers, base)
	}
	if system != nil {
		sys, err := system()
		if err != nil {
			return nil, err
		}
		layers = append(layers, sys)
	}
	cfg := v1.Config{User: l.user}
	if l.entrypoint != "" { // none: each container names its command
		cfg.Entrypoint = []string{l.entrypoint}
	}
	return ociimage.Image(cfg, append(layers, programs...)...)
}

func newToolboxCommand() *cobra.Command {
	var busybox, sshcheck string
	cmd := &cobra.Command{
		Use:   "toolbox",
		Short: "A client image for end-to-end tests: static busybox with a link for every applet in /bin, and sshcheck",
		Args:  cobra.NoArgs,
	}
	o := addOutputFlags(cmd, "localhost/virtpod/toolbox:dev")
	cmd.Flags().StringVar(&busybox, "busybox", "/bin/busybox", "static busybox binary (Debian's busybox-static)")
	sshcheckProgram.addFlag(cmd, &sshcheck)
	cmd.RunE = func(*cobra.Command, []string) error {
		if err := o.check(); err != nil {
			return err
		}
		work, err := os.MkdirTemp("", "imagebuild-toolbox-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(work)
		if sshcheck, err = goBinary(sshcheckProgram.flag, sshcheck, sshcheckProgram.pkg, work); err != nil {
			return err
		}
		img, err := toolboxImage(busybox, sshcheck)
		if err != nil {
			return err
		}
		return o.write(img)
	}
	return cmd
}

func toolboxImage(busybox, sshcheck string) (v1.Image, error) {
	base, err := baseLayer()
	if err != nil {
		return nil, err
	}
	l := ociimage.NewLayer("busybox")
	if err := addBusybox(l, busybox, nil); err != nil {
		return nil, err
	}
	ssh, err := binaryLayer("sshcheck", toolboxSSHCheck, sshcheck)
	if err != nil {
		return nil, err
	}
	// Cmd, not Entrypoint, like the busybox image: a pod's args then name the applet to run.
	return ociimage.Image(v1.Config{Cmd: []string{"sh"}}, base, l, ssh)
}

// devLoopApplets are what the runner image carries of busybox for the dev loop: kubectl cp and
// Tilt's live_update sync unpack with tar (and delete with rm) inside the runner container,
// into a virtio-fs share (docs/dev-loop.md); Tilt's run() steps go through sh.
var devLoopApplets = []string{"sh", "tar", "rm", "mkdir", "ls", "cat", "mv", "cp"}

// addBusybox puts the static busybox at /bin/busybox in l, with a link in /bin for each of
// applets (nil: every applet it has).
func addBusybox(l *ociimage.Layer, busybox string, applets []string) error {
	res, err := elfdeps.Resolver{}.Resolve(busybox)
	if err != nil {
		return fmt.Errorf("--busybox: %w: install busybox-static", err)
	}
	if len(res.Interpreters) > 0 {
		return fmt.Errorf("--busybox: %s is dynamically linked: install Debian's busybox-static (it replaces busybox)", busybox)
	}
	// The applet list comes from the binary itself, so every link works.
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("--busybox: %s --list: %w", busybox, err)
	}
	has := strings.Fields(string(out))
	if applets == nil {
		applets = has
	}
	for _, a := range append([]string{"sh"}, applets...) {
		if !slices.Contains(has, a) {
			return fmt.Errorf("--busybox: %s has no %s applet: use Debian's busybox-static", busybox, a)
		}
	}
	if err := l.HostFile(busyboxBinary, busybox, 0o755); err != nil {
		return err
	}
	for _, a := range applets {
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		if err := l.Symlink("/bin/"+a, "busybox"); err != nil {
			return err
		}
	}
	return nil
}

func newVMCommand() *cobra.Command {
	var f vmimage.Files
	var diskSize, copier string
	cmd := &cobra.Command{
		Use: "vm",
		Short: "A VM image: --kernel to /boot/vmlinuz, --initrd to /boot/initrd.img, a root disk to /disk/root.img (or /disk/<--disk-name>) " +
			"(--disk, or raw ext4 made from --rootfs or --rootfs-tar with --disk-size), and the copy program /virtpod/bin/vmcopy",
		Args: cobra.NoArgs,
	}
	o := addOutputFlags(cmd, "localhost/virtpod/guest:dev")
	fl := cmd.Flags()
	fl.StringVar(&f.Kernel, "kernel", "", "guest kernel, installed as "+vmimage.KernelPath+": a bzImage (stored as the PVH vmlinux inside it) or a vmlinux with a PVH entry")
	fl.BoolVar(&f.KeepBzImage, "keep-bzimage", false, "store a bzImage --kernel as given instead of unpacking it (QEMU then holds a copy of it in each VM's memory); for kernels without a PVH entry or with xz or LZO payloads")
	fl.StringVar(&f.Initrd, "initrd", "", "guest initramfs, installed as "+vmimage.InitrdPath)
	fl.StringVar(&f.Disk, "disk", "", "root disk, raw or qcow2, installed as "+vmimage.DiskPath+" (or --disk-name)")
	fl.StringVar(&f.DiskName, "disk-name", "", "the root disk's file name in "+vmimage.DiskDir+": root.img (default), or a KubeVirt containerDisk name ending .qcow2, .img or .raw (e.g. debian-12.qcow2)")
	fl.StringVar(&f.Rootfs, "rootfs", "", "root filesystem directory to make the root disk from (raw ext4, with --disk-size)")
	fl.StringVar(&f.RootfsTar, "rootfs-tar", "", "root filesystem tarball, plain or gzip (e.g. from docker export), to make the root disk from (raw ext4, with --disk-size)")
	fl.StringVar(&diskSize, "disk-size", "", "size of the disk --rootfs or --rootfs-tar makes, e.g. 2Gi or 512Mi (the file is sparse)")
	vmcopyProgram.addFlag(cmd, &copier)
	cmd.RunE = func(*cobra.Command, []string) error {
		if err := o.check(); err != nil {
			return err
		}
		if diskSize != "" {
			q, err := resource.ParseQuantity(diskSize)
			if err != nil || q.Sign() <= 0 {
				return fmt.Errorf("--disk-size=%s: want a size such as 2Gi, 512Mi or 1G", diskSize)
			}
			f.DiskSize = q.Value()
		}
		// Made disks, the compressed disk layer and the copy program go here until the archive
		// is written: $TMPDIR needs room for about twice the disk's data.
		work, err := os.MkdirTemp("", "imagebuild-vm-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(work)
		if f.Copier, err = goBinary(vmcopyProgram.flag, copier, vmcopyProgram.pkg, work); err != nil {
			return err
		}
		img, err := vmimage.Image(f, work)
		if err != nil {
			return err
		}
		return o.write(img)
	}
	return cmd
}

func newCoreDNSCommand() *cobra.Command {
	var binary string
	cmd := &cobra.Command{
		Use:   "coredns",
		Short: "The local cluster's DNS server: a CoreDNS binary (make coredns builds it), running as user 65532",
		Args:  cobra.NoArgs,
	}
	o := addOutputFlags(cmd, "localhost/virtpod/coredns:v1.15.0")
	cmd.Flags().StringVar(&binary, "binary", "", "static CoreDNS binary (required; make coredns builds it into $VIRTPOD_CACHE/coredns-*)")
	cmd.RunE = func(*cobra.Command, []string) error {
		if err := o.check(); err != nil {
			return err
		}
		if binary == "" {
			return fmt.Errorf("--binary is required: the CoreDNS binary to package (make coredns builds it)")
		}
		bin, err := goBinary("--binary", binary, "", "")
		if err != nil {
			return err
		}
		base, err := baseLayer()
		if err != nil {
			return err
		}
		layer, err := binaryLayer("coredns", "/coredns", bin)
		if err != nil {
			return err
		}
		img, err := ociimage.Image(v1.Config{Entrypoint: []string{"/coredns"}, User: "65532:65532"}, base, layer)
		if err != nil {
			return err
		}
		return o.write(img)
	}
	return cmd
}
