package main

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/virtpod/virtpod/pkg/image/ociimage"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/runner/binaries"
)

// module is this repository's Go module; a goProgram's pkg is under it.
const module = "github.com/virtpod/virtpod"

// goProgram is a static Go binary an image carries.
type goProgram struct {
	what string // in flag help: "prebuilt static <what> binary"
	pkg  string // import path go build builds
	dest string // path in the image
	flag string // flag that passes a prebuilt binary instead
}

// imageLayout is what an image of Go programs holds. Dockerfile.<name>, where there is one, must
// build the same: the same programs from the same packages at the same paths, the same
// entrypoint and user, the same Debian packages (dockerfile_test.go).
type imageLayout struct {
	name       string // the imagebuild subcommand
	programs   []goProgram
	entrypoint string
	user       string // "" runs as root
	base       bool   // with baseLayer: /etc/passwd, /etc/group, /tmp
	// debian are the Debian packages the image's other files come from, as
	// `apt-get install --no-install-recommends` names them.
	debian []string
}

// The images with Go programs in them.
var (
	runnerLayout = imageLayout{
		name: "runner",
		programs: []goProgram{
			{"runner", module + "/cmd/virtpod-runner", podspec.RunnerBinary, "--binary"},
			// The node agent (and device plugin): in the runner image so it probes the runner's QEMU.
			{"node agent", module + "/cmd/virtpod-agent", "/usr/local/bin/virtpod-agent", "--agent-binary"},
		},
		entrypoint: podspec.RunnerBinary,
		base:       true,
		debian:     qemuDebianPackages(),
	}
	controllerLayout = imageLayout{
		name:       "controller",
		programs:   []goProgram{{"controller", module + "/cmd/virtpod-controller", "/usr/local/bin/virtpod-controller", "--binary"}},
		entrypoint: "/usr/local/bin/virtpod-controller",
		user:       "65532:65532", // distroless's nonroot
		base:       true,
	}
	// pauseLayout runs as 65535 like the upstream pause image; it needs no /etc/passwd.
	pauseLayout = imageLayout{
		name:       "pause",
		programs:   []goProgram{{"pause", module + "/tools/imagebuild/pause", "/pause", "--binary"}},
		entrypoint: "/pause",
		user:       "65535:65535",
	}
	// vmcopyProgram is the copy program every VM image carries (pkg/image/vmimage).
	vmcopyProgram = goProgram{"copy program", module + "/cmd/vmcopy", "", "--vmcopy-binary"}
	// sshcheckProgram is the toolbox's SSH client (tools/dev/sshcheck), at toolboxSSHCheck.
	sshcheckProgram = goProgram{"SSH client", module + "/tools/dev/sshcheck", "", "--sshcheck-binary"}
)

const toolboxSSHCheck = "/bin/sshcheck"

// flags adds one flag per program for a prebuilt binary; the answers are in the programs' order.
func (l imageLayout) flags(cmd *cobra.Command) []string {
	prebuilt := make([]string, len(l.programs))
	for i, p := range l.programs {
		p.addFlag(cmd, &prebuilt[i])
	}
	return prebuilt
}

func (p goProgram) addFlag(cmd *cobra.Command, to *string) {
	cmd.Flags().StringVar(to, strings.TrimPrefix(p.flag, "--"), "",
		fmt.Sprintf("prebuilt static %s binary (default: go build ./%s)", p.what, strings.TrimPrefix(p.pkg, module+"/")))
}

// layers builds (or takes prebuilt) each program into dir and returns one layer per program,
// named after its binary.
func (l imageLayout) layers(prebuilt []string, dir string) ([]*ociimage.Layer, error) {
	var layers []*ociimage.Layer
	for i, p := range l.programs {
		bin, err := goBinary(p.flag, prebuilt[i], p.pkg, dir)
		if err != nil {
			return nil, err
		}
		layer, err := binaryLayer(path.Base(p.dest), p.dest, bin)
		if err != nil {
			return nil, err
		}
		layers = append(layers, layer)
	}
	return layers, nil
}

// qemuDebianPackages are the packages qemuLayer takes programs and modules from, sorted, for
// the default runner image (Debian 13's). The firmware's packages (qemuFirmware) are
// dependencies of qemu-system-x86: installing these brings them; OVMF (guestFirmware) is not, so
// its package is listed; virtiofsd is its own package (Debian 12 has none: its image lacks it).
func qemuDebianPackages() []string {
	pkgs := []string{"virtiofsd"}
	for _, p := range qemuPackages {
		if !slices.Contains(pkgs, p) {
			pkgs = append(pkgs, p)
		}
	}
	for _, f := range guestFirmware {
		if p := binaries.FirmwarePackages[f]; !slices.Contains(pkgs, p) {
			pkgs = append(pkgs, p)
		}
	}
	slices.Sort(pkgs)
	return pkgs
}
