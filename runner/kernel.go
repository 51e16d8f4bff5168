package runner

import (
	"io"
	"os"

	"github.com/virtpod/virtpod/pkg/pvhkernel"
)

// bzImageSize says whether the kernel file is a bzImage, which QEMU copies into its own memory
// for a -kernel boot, and its size: what that copy costs.
func bzImageSize(kernel string) (int64, bool) {
	f, err := os.Open(kernel)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	head := make([]byte, 0x206)
	if _, err := io.ReadFull(f, head); err != nil || !pvhkernel.IsBzImage(head) {
		return 0, false
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, false
	}
	return fi.Size(), true
}
