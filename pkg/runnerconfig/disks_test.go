package runnerconfig_test

import (
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
)

func diskConfig() runnerconfig.Config {
	c := runnerconfig.Config{Name: "db", GuestSize: vmv1.GuestSize{CPUs: 1, MemoryMiB: 256}, Kernel: "/k", RootDisk: "/virtpod/images/disk/disk/root.img",
		RootVolume: &runnerconfig.Disk{Kind: runnerconfig.DiskFile, Path: "/virtpod/root", Migrate: runnerconfig.MigrateCopy},
		Disks: []runnerconfig.Disk{
			{Name: "data", Kind: runnerconfig.DiskFile, Path: "/virtpod/disks/data", SizeMiB: 1024},
			{Name: "raw", Kind: runnerconfig.DiskBlock, Path: "/dev/virtpod/raw", Migrate: runnerconfig.MigrateShared},
			{Name: "scratch", Kind: runnerconfig.DiskEmpty, Path: "/virtpod/disks/scratch", SizeMiB: 64},
			{Name: "config", Kind: runnerconfig.DiskFiles, Path: "/virtpod/disks/config", ReadOnly: true},
			{Name: "tools", Kind: runnerconfig.DiskImage, Path: "/virtpod/disks/tools/disk/root.img", ReadOnly: true},
			{Name: "shared", Kind: runnerconfig.DiskBlock, Path: "/dev/virtpod/shared", ReadOnly: true},
		}}
	c.Defaults()
	return c
}

// TestDisksRoundTrip: every kind of disk renders to flags that read back unchanged, in order
// (the order is the guest's).
func TestDisksRoundTrip(t *testing.T) {
	want := diskConfig()
	args := want.Args()
	for _, a := range []string{
		"--root-volume=kind=file,path=/virtpod/root,migrate=copy",
		"--disk=name=data,kind=file,path=/virtpod/disks/data,size-mib=1024 ",
		"--disk=name=raw,kind=block,path=/dev/virtpod/raw,migrate=shared",
		"--disk=name=tools,kind=image,path=/virtpod/disks/tools/disk/root.img,readonly",
	} {
		if !strings.Contains(strings.Join(args, " "), a) {
			t.Errorf("Args %q lack %s", args, a)
		}
	}
	got, err := runnerconfigtest.Parse(args)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip\n got %+v\nwant %+v", got, want)
	}
	// A root disk on a claim alone: no image, no --root-disk.
	want.RootDisk = ""
	if got, err := runnerconfigtest.Parse(want.Args()); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("a root volume without an image: %+v, %v", got, err)
	}
}

// TestHotplugSlotsRoundTrip: the slots and a disk's place on one read back; no slots is no flag.
func TestHotplugSlotsRoundTrip(t *testing.T) {
	want := diskConfig()
	if a := strings.Join(want.Args(), " "); strings.Contains(a, "hotplug-slots") || strings.Contains(a, "slot=") {
		t.Errorf("a guest without slots has %q", a)
	}
	want.HotplugSlots = 4
	want.Disks[0].Hotplug, want.Disks[0].Slot = true, 3
	args := strings.Join(want.Args(), " ")
	for _, a := range []string{"--hotplug-slots=4", "--disk=name=data,kind=file,path=/virtpod/disks/data,size-mib=1024,slot=3 "} {
		if !strings.Contains(args, a) {
			t.Errorf("Args %q lack %s", args, a)
		}
	}
	if got, err := runnerconfigtest.Parse(want.Args()); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
}

// TestDisksRefused: each bad disk is refused naming the flag and the fix.
func TestDisksRefused(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*runnerconfig.Config)
		want   string
	}{
		{"duplicate name", func(c *runnerconfig.Config) { c.Disks[1].Name = "data" }, `--disk: name "data" given twice`},
		{"root name", func(c *runnerconfig.Config) { c.Disks[0].Name = "root" }, "not root or cidata"},
		{"long name", func(c *runnerconfig.Config) { c.Disks[0].Name = strings.Repeat("a", 21) }, "at most 20 characters"},
		{"unknown kind", func(c *runnerconfig.Config) { c.Disks[0].Kind = "nbd" }, `kind "nbd": use block`},
		{"comma in path", func(c *runnerconfig.Config) { c.Disks[0].Path = "/a,kind=block" }, "want an absolute path"},
		{"relative path", func(c *runnerconfig.Config) { c.Disks[0].Path = "disks/data" }, "want an absolute path"},
		{"empty disk without size", func(c *runnerconfig.Config) { c.Disks[2].SizeMiB = 0 }, "size-mib must be at least 1"},
		{"file disk of negative size", func(c *runnerconfig.Config) { c.Disks[0].SizeMiB = -1 }, "must not be negative"},
		{"block with size", func(c *runnerconfig.Config) { c.Disks[1].SizeMiB = 5 }, "size-mib is only for file and empty disks"},
		{"writable files disk", func(c *runnerconfig.Config) { c.Disks[3].ReadOnly = false }, "always readonly"},
		{"read-only empty disk", func(c *runnerconfig.Config) { c.Disks[2].ReadOnly = true }, "drop readonly"},
		{"unknown migrate mode", func(c *runnerconfig.Config) { c.Disks[0].Migrate = "move" }, `migrate "move": use copy`},
		{"migrate on an empty disk", func(c *runnerconfig.Config) { c.Disks[2].Migrate = runnerconfig.MigrateCopy }, "an empty disk is always copied"},
		{"copy of a read-only claim", func(c *runnerconfig.Config) { c.Disks[5].Migrate = runnerconfig.MigrateCopy }, "on a read-only claim: nothing is written to it"},
		{"migrate on an image disk", func(c *runnerconfig.Config) { c.Disks[4].Migrate = runnerconfig.MigrateShared }, "only for a claim"},
		{"named root volume", func(c *runnerconfig.Config) { c.RootVolume.Name = "x" }, "--root-volume: the root disk takes no name"},
		{"image root volume", func(c *runnerconfig.Config) { c.RootVolume.Kind = runnerconfig.DiskImage }, "kind block or file"},
		{"block root filled from an image", func(c *runnerconfig.Config) {
			c.RootVolume = &runnerconfig.Disk{Kind: runnerconfig.DiskBlock, Path: "/dev/virtpod/root"}
		}, "filling a Block claim from an image is not supported"},
		{"hotplug slots on cloud-hypervisor", func(c *runnerconfig.Config) {
			c.HotplugSlots, c.Provider = 2, runnerconfig.ProviderCloudHypervisor
		}, `--hotplug-slots: only provider qemu attaches and detaches disks of a running guest, not "cloud-hypervisor"`},
		{"too many hotplug slots", func(c *runnerconfig.Config) { c.HotplugSlots = 17 }, "--hotplug-slots 17: want 0 to 16"},
		{"slot beyond the slots", func(c *runnerconfig.Config) { c.Disks[0].Hotplug, c.Disks[0].Slot = true, 0 }, "--disk data: slot 0: the guest has 0 hotplug slots"},
		{"slot taken twice", func(c *runnerconfig.Config) {
			c.HotplugSlots = 2
			c.Disks[0].Hotplug, c.Disks[1].Hotplug = true, true
		}, "--disk raw: slot 0 is another disk's"},
		{"image disk on a slot", func(c *runnerconfig.Config) { c.HotplugSlots, c.Disks[4].Hotplug = 1, true }, "an image disk is never on a hotplug slot"},
		{"no root disk at all", func(c *runnerconfig.Config) { c.RootDisk, c.RootVolume = "", nil }, "--root-disk: the path of the root-disk image is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := diskConfig()
			tc.mutate(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error with %q", err, tc.want)
			}
		})
	}
	if c := diskConfig(); c.Validate() != nil {
		err := c.Validate()
		t.Fatalf("the valid configuration is refused: %v", err)
	}
}

// TestParseDiskRefuses: a --disk value that is not what String writes is an error, not a
// silently different disk.
func TestParseDiskRefuses(t *testing.T) {
	for _, v := range []string{"name=a,name=b", "name=a,kind=file,path=/p,size-mib=x", "name=a,readonly=yes", "name=a,cache=unsafe", "path"} {
		if d, err := runnerconfig.ParseDisk(v); err == nil {
			t.Errorf("ParseDisk(%q) = %+v, want an error", v, d)
		}
	}
}

// FuzzDiskRoundTrip: any disk list Validate accepts renders to flags that parse back to the same
// disks, with nothing left over; a name or path cannot add a flag or another disk's option.
func FuzzDiskRoundTrip(f *testing.F) {
	f.Add("data", "file", "/virtpod/disks/data", int64(1024), false, "config", "files", "/virtpod/disks/config", int64(0), true, "file", "/virtpod/root")
	f.Add("raw", "block", "/dev/virtpod/raw", int64(0), true, "s", "empty", "/s", int64(1), false, "block", "/dev/virtpod/root")
	f.Add("a,kind=block", "file", "/p,readonly", int64(1), false, "b", "image", "/i", int64(0), true, "", "")
	f.Add("x", "image", "/virtpod/disks/x/disk/root.img", int64(0), true, "x", "image", "/y", int64(0), true, "file", "/r --disk=name=evil")
	f.Fuzz(func(t *testing.T, n1, k1, p1 string, s1 int64, ro1 bool, n2, k2, p2 string, s2 int64, ro2 bool, rootKind, rootPath string) {
		c := runnerconfig.Config{Name: "vm", GuestSize: vmv1.GuestSize{CPUs: 1, MemoryMiB: 64}, Kernel: "/k", RootDisk: "/d",
			Disks: []runnerconfig.Disk{{Name: n1, Kind: k1, Path: p1, SizeMiB: s1, ReadOnly: ro1}, {Name: n2, Kind: k2, Path: p2, SizeMiB: s2, ReadOnly: ro2}}}
		if rootKind != "" || rootPath != "" {
			c.RootVolume = &runnerconfig.Disk{Kind: rootKind, Path: rootPath}
			if rootKind == runnerconfig.DiskBlock {
				c.RootDisk = ""
			}
		}
		c.Defaults()
		if c.Validate() != nil {
			return
		}
		args := c.Args()
		var got runnerconfig.Config
		fs := flag.NewFlagSet("runner", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		got.Bind(fs)
		if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
			t.Fatalf("Args %q: %v, left %q", args, err, fs.Args())
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip changed the disks\nargs %q\n got %+v\nwant %+v", args, got, c)
		}
	})
}
