package qemu

import (
	"strings"
	"testing"
)

func diskSpec() Spec {
	s := baseSpec()
	s.Acceleration, s.TapFD, s.MAC = "tcg", 0, nil
	s.SeedPath = "/var/run/virtpod/cidata.iso"
	s.Disks = []Drive{
		{Serial: "data", Path: "/virtpod/disks/data/disk.img", Format: "raw", Cache: CacheNone},
		{Serial: "raw", Path: "/dev/virtpod/raw", Format: "raw", Block: true, Cache: CacheNone},
		{Serial: "config", Path: "/var/run/virtpod/disk-config.iso", Format: "raw", ReadOnly: true, Cache: CacheWriteback},
		{Serial: "tools", Path: "/virtpod/disks/tools/disk/root.img", Format: "qcow2", ReadOnly: true, Cache: CacheNone},
	}
	return s
}

// TestDiskGolden: data disks after the root disk and the seed, each with its serial; a root
// disk on a Block claim is a host device, raw, with no overlay.
func TestDiskGolden(t *testing.T) {
	blockRoot := baseSpec()
	blockRoot.DiskPath, blockRoot.DiskFormat, blockRoot.DiskBlock = "/dev/virtpod/root", "raw", true
	hostile := diskSpec()
	hostile.Disks[0].Path = "/virtpod/disks/d,file.driver=host_device,file.filename=/dev/sda/disk.img"
	for name, s := range map[string]Spec{"data-disks": diskSpec(), "root-on-block-claim": blockRoot, "hostile-disk-path": hostile} {
		t.Run(name, func(t *testing.T) {
			args, err := Args(s)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name, args)
		})
	}
}

// TestDisksRefused: what could let a guest or a bad path reach past its disk is refused.
func TestDisksRefused(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Spec)
		want   string
	}{
		{"writable qcow2", func(s *Spec) { s.Disks[3].ReadOnly = false }, "a writable data disk is raw, never qcow2"},
		{"qcow2 block device", func(s *Spec) { s.Disks[1].Format = "qcow2"; s.Disks[1].ReadOnly = true }, "a block device is raw"},
		{"serial too long", func(s *Spec) { s.Disks[0].Serial = strings.Repeat("d", 21) }, "at most 20 characters"},
		{"serial with a comma", func(s *Spec) { s.Disks[0].Serial = "a,drive=root" }, "DNS label"},
		{"duplicate serial", func(s *Spec) { s.Disks[1].Serial = "data" }, `"data" used twice`},
		{"unsafe cache", func(s *Spec) { s.Disks[0].Cache = "unsafe" }, "never one that drops the guest's flushes"},
		{"newline in path", func(s *Spec) { s.Disks[0].Path = "/a\n-drive" }, "no NUL or newline"},
		{"qcow2 root on a block device", func(s *Spec) { s.DiskBlock = true }, "a root disk on a block device is raw"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := diskSpec()
			tc.mutate(&s)
			if _, err := Args(s); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Args: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
