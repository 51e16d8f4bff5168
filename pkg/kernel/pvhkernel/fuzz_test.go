package pvhkernel_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/virtpod/virtpod/pkg/kernel/pvhkernel"
	"github.com/virtpod/virtpod/pkg/kernel/pvhkernel/pvhkerneltest"
)

// FuzzUnpack feeds Unpack hostile files (make fuzz-pvhkernel): it must not panic, and whatever
// it returns must be a kernel QEMU boots by PVH (Trim accepts it unchanged) no larger than the
// length the payload claimed.
func FuzzUnpack(f *testing.F) {
	k := pvhkerneltest.ELF([]byte("seed kernel text"), true)
	for _, c := range []string{"gzip", "lz4", "zstd", "lzma"} {
		f.Add(pvhkerneltest.BzImage(k, c))
	}
	f.Add(pvhkerneltest.BzImage(pvhkerneltest.ELF([]byte("x"), false), "gzip"))
	f.Fuzz(func(t *testing.T, img []byte) {
		got, err := pvhkernel.Unpack(img)
		if err != nil {
			return
		}
		payload, _ := pvhkernel.Payload(img)
		if claim := binary.LittleEndian.Uint32(payload[len(payload)-4:]); uint64(len(got)) > uint64(claim) {
			t.Fatalf("%d bytes unpacked, the payload claims %d", len(got), claim)
		}
		again, err := pvhkernel.Trim(got)
		if err != nil || !bytes.Equal(again, got) {
			t.Fatalf("Unpack returned what Trim refuses or cuts: %v", err)
		}
	})
}
