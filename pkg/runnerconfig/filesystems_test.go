package runnerconfig_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
)

func fsConfig() runnerconfig.Config {
	c := diskConfig()
	c.Filesystems = []runnerconfig.Filesystem{
		{Tag: "web", Path: "/virtpod/fs/web"},
		{Tag: "conf", Path: "/virtpod/fs/conf", ReadOnly: true},
	}
	return c
}

// TestFilesystemsRoundTrip: --filesystem flags read back unchanged, in order.
func TestFilesystemsRoundTrip(t *testing.T) {
	want := fsConfig()
	args := strings.Join(want.Args(), " ")
	for _, a := range []string{"--filesystem=tag=web,path=/virtpod/fs/web --filesystem=tag=conf,path=/virtpod/fs/conf,readonly"} {
		if !strings.Contains(args, a) {
			t.Errorf("Args %q lack %s", args, a)
		}
	}
	got, err := runnerconfigtest.Parse(want.Args())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip\n got %+v\nwant %+v", got.Filesystems, want.Filesystems)
	}
}

// TestFilesystemsRefused: each bad --filesystem is refused naming the flag and the fix.
func TestFilesystemsRefused(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*runnerconfig.Config)
		want   string
	}{
		{"duplicate tag", func(c *runnerconfig.Config) { c.Filesystems[1].Tag = "web" }, `tag "web" given twice`},
		{"long tag", func(c *runnerconfig.Config) { c.Filesystems[0].Tag = strings.Repeat("a", 37) }, "at most 36 characters"},
		{"tag not a label", func(c *runnerconfig.Config) { c.Filesystems[0].Tag = "Web" }, "must be a DNS label"},
		{"comma in path", func(c *runnerconfig.Config) { c.Filesystems[0].Path = "/a,readonly" }, "must be an absolute path"},
		{"relative path", func(c *runnerconfig.Config) { c.Filesystems[0].Path = "fs/web" }, "must be an absolute path"},
		{"cloud-hypervisor", func(c *runnerconfig.Config) { c.Provider = runnerconfig.ProviderCloudHypervisor }, "--filesystem: only for provider qemu"},
		{"suspend", func(c *runnerconfig.Config) { c.SuspendTo = "/virtpod/state/guest.state" }, "not with --suspend-to"},
		{"too many", func(c *runnerconfig.Config) {
			for i := range 7 {
				c.Filesystems = append(c.Filesystems, runnerconfig.Filesystem{Tag: "x" + strings.Repeat("y", i), Path: "/x"})
			}
		}, "9 given, at most 8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := fsConfig()
			tc.mutate(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error with %q", err, tc.want)
			}
		})
	}
	if c := fsConfig(); c.Validate() != nil {
		t.Fatalf("the valid configuration is refused: %v", c.Validate())
	}
	for _, v := range []string{"tag=a,tag=b", "tag=a,readonly=yes", "tag=a,cache=always", "path"} {
		if f, err := runnerconfig.ParseFilesystem(v); err == nil {
			t.Errorf("ParseFilesystem(%q) = %+v, want an error", v, f)
		}
	}
}
