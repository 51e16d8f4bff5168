package qemu

import (
	"slices"
	"strings"
	"testing"
)

// TestFilesystemGolden: a guest with two shares, fixed size and resizable: each share a
// vhost-user-fs device on its virtiofsd's socket, and every byte of guest RAM (boot and
// virtio-mem) a shared memfd, which virtiofsd needs to map. A hostile socket path stays one
// value of its option list.
func TestFilesystemGolden(t *testing.T) {
	fs := baseSpec()
	fs.Acceleration = "tcg"
	fs.Filesystems = []Filesystem{{Tag: "web", Socket: "/run/virtpod/control/fs-web.sock"}, {Tag: "conf", Socket: "/run/virtpod/control/fs-conf.sock"}}
	resizable := fs
	resizable.CPUs, resizable.MaxCPUs, resizable.MemoryMiB, resizable.MaxMemoryMiB = 1, 2, 512, 1024
	hostile := fs
	hostile.Filesystems = []Filesystem{{Tag: "web", Socket: "/run/vp,path=/etc/shadow/fs-web.sock"}}
	for name, s := range map[string]Spec{"filesystems": fs, "filesystems-resizable": resizable, "hostile-filesystem": hostile} {
		t.Run(name, func(t *testing.T) {
			args, err := Args(s)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name, args)
		})
	}
}

// TestPrivateMemoryWithoutFilesystems: a guest without shares keeps QEMU's private RAM; no
// memfd, no memory-backend on -machine.
func TestPrivateMemoryWithoutFilesystems(t *testing.T) {
	args, err := Args(baseSpec())
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(args, " ")
	if strings.Contains(joined, "memfd") || strings.Contains(joined, "memory-backend=") || slices.Contains(args, "vhost-user-fs-pci") {
		t.Fatalf("a guest without filesystems shares its memory: %q", args)
	}
}

// TestFilesystemRejects: tags that are no labels, a duplicate, a missing socket, and a share on
// a migration's target are refused.
func TestFilesystemRejects(t *testing.T) {
	for name, fs := range map[string][]Filesystem{
		"tag with a comma": {{Tag: "web,id=x", Socket: "/s"}},
		"long tag":         {{Tag: strings.Repeat("a", 37), Socket: "/s"}},
		"duplicate tag":    {{Tag: "web", Socket: "/s"}, {Tag: "web", Socket: "/t"}},
		"no socket":        {{Tag: "web"}},
		"newline socket":   {{Tag: "web", Socket: "/s\n-drive"}},
	} {
		s := baseSpec()
		s.Filesystems = fs
		if _, err := Args(s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	s := baseSpec()
	s.Filesystems = []Filesystem{{Tag: "web", Socket: "/s"}}
	s.IncomingSocket = "/run/virtpod/control/migrate-in.sock"
	if _, err := Args(s); err == nil || !strings.Contains(err.Error(), "cannot be a migration's target") {
		t.Errorf("a share on an incoming guest: %v", err)
	}
}
