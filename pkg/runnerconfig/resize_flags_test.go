package runnerconfig_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
)

// TestResizeFlagsRoundTrip: what the controller renders for a resizable guest (pkg/podspec)
// reads back unchanged through the runner's flags; a fixed-size guest gets no --max-* flag; bad
// bounds are refused naming the flag.
func TestResizeFlagsRoundTrip(t *testing.T) {
	grow := runnerconfig.Config{Name: "web", GuestSize: vmv1.GuestSize{CPUs: 1, MemoryMiB: 256, MaxCPUs: 4, MaxMemoryMiB: 1024}, RootDisk: "/d",
		ControlSocket: runnerconfig.DefaultControlSocket}
	grow.Defaults()
	args := grow.Args()
	for _, want := range []string{"--max-cpus=4", "--max-memory-mib=1024"} {
		if !slices.Contains(args, want) {
			t.Errorf("Args %q lack %s", args, want)
		}
	}
	got, err := runnerconfigtest.Parse(args)
	if err != nil || !reflect.DeepEqual(got, grow) {
		t.Fatalf("read back %+v, %v; want %+v", got, err, grow)
	}
	fixed := grow
	fixed.MaxCPUs, fixed.MaxMemoryMiB, fixed.ControlSocket = 0, 0, ""
	if a := fixed.Args(); slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "--max-") }) || !slices.Contains(a, "--control-socket=") {
		t.Errorf("a fixed-size guest without a socket: %q", a)
	}
	for flags, want := range map[string]string{
		"--max-cpus=1":         "--max-cpus: 1 must be between --cpus (2) and 255",
		"--max-memory-mib=300": "must be multiples of 128",
		"--max-memory-mib=128": "--max-memory-mib: 128 must be at least --memory-mib (256)",
		"--max-cpus=4":         "",
		"--control-socket=":    "",
	} {
		_, err := runnerconfigtest.Parse([]string{"--name=web", "--cpus=2", "--memory-mib=256", "--root-disk=/d", flags})
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", flags, err, want)
		}
	}
}
