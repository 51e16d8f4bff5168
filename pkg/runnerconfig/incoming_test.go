package runnerconfig_test

import (
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
)

// TestIncomingFlag: a migration target's --incoming reads back unchanged; a runner that is no
// target gets no flag; a target without a control socket or under cloud-hypervisor is refused
// naming the flag.
func TestIncomingFlag(t *testing.T) {
	target := runnerconfig.Config{Name: "web", GuestSize: vmv1.GuestSize{CPUs: 1, MemoryMiB: 256}, RootDisk: "/d", Incoming: true,
		ControlSocket: runnerconfig.DefaultControlSocket}
	target.Defaults()
	args := target.Args()
	if !slices.Contains(args, "--incoming") {
		t.Fatalf("Args %q lack --incoming", args)
	}
	got, err := runnerconfigtest.Parse(args)
	if err != nil || !reflect.DeepEqual(got, target) {
		t.Fatalf("read back %+v, %v; want %+v", got, err, target)
	}
	source := target
	source.Incoming = false
	if a := source.Args(); slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "--incoming") }) {
		t.Errorf("a runner that is no target: %q", a)
	}
	base := []string{"--name=web", "--cpus=1", "--memory-mib=256", "--root-disk=/d", "--incoming"}
	for flags, want := range map[string]string{
		"--control-socket=":                   "--incoming: needs --control-socket",
		"--provider=cloud-hypervisor":         `--incoming: only provider qemu can receive a live migration, not "cloud-hypervisor"`,
		"--control-socket=/run/x/runner.sock": "",
		"--incoming=false":                    "",
	} {
		c, err := runnerconfigtest.Parse(append(slices.Clone(base), flags))
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", flags, err, want)
		}
		if flags == "--incoming=false" && c.Incoming {
			t.Errorf("--incoming=false read as a target")
		}
	}
}

// TestSuspendFlags: --suspend-to and --resume-from read back unchanged, and are refused, naming
// the flag and the fix, for a guest whose writable disks are not all volumes, a relative path,
// cloud-hypervisor, or a resume that is also a migration's target.
func TestSuspendFlags(t *testing.T) {
	base := []string{"--name=web", "--cpus=1", "--memory-mib=256", "--root-disk=/d"}
	claim := "--root-volume=kind=file,path=/virtpod/root"
	ok, err := runnerconfigtest.Parse(append(slices.Clone(base), claim, "--suspend-to=/virtpod/state/guest.state", "--resume-from=/virtpod/state/guest.state"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := runnerconfigtest.Parse(ok.Args()); err != nil || !reflect.DeepEqual(got, ok) {
		t.Fatalf("read back %+v, %v; want %+v", got, err, ok)
	}
	for flags, want := range map[string]string{
		"--suspend-to=/s":         "--suspend-to: every writable disk must be a volume",
		claim + " --suspend-to=s": `--suspend-to: "s" must be an absolute path`,
		claim + " --resume-from=/s --provider=cloud-hypervisor":               "--resume-from: only provider qemu can save and load",
		claim + " --resume-from=/s --incoming":                                "--resume-from and --incoming",
		claim + " --suspend-to=/s --disk=name=scratch,kind=empty,size-mib=64": "--suspend-to: every writable disk must be a volume",
	} {
		_, err := runnerconfigtest.Parse(append(slices.Clone(base), strings.Fields(flags)...))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", flags, err, want)
		}
	}
}
