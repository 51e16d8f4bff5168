package runner

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/virtpod/virtpod/pkg/pvhkernel/pvhkerneltest"
)

func TestBzImageSize(t *testing.T) {
	dir := t.TempDir()
	elf := pvhkerneltest.ELF([]byte("text"), true)
	bz := pvhkerneltest.BzImage(elf, "gzip")
	for name, b := range map[string][]byte{"vmlinuz": bz, "vmlinux": elf, "short": bz[:0x100]} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if size, ok := bzImageSize(filepath.Join(dir, "vmlinuz")); !ok || size != int64(len(bz)) {
		t.Errorf("bzImage: %d, %v; want %d, true", size, ok, len(bz))
	}
	for _, name := range []string{"vmlinux", "short", "missing"} {
		if _, ok := bzImageSize(filepath.Join(dir, name)); ok {
			t.Errorf("%s taken for a bzImage", name)
		}
	}
}
