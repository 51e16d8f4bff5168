// Package rfbtest is a minimal VNC client for tests: enough of RFB 3.8 to prove a display
// answers (the runner's test over virtpod-runner vnc, the end-to-end test over vmctl vnc).
package rfbtest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// Handshake runs a VNC client's side of RFB 3.8 over in and out, up to the first framebuffer
// update: ProtocolVersion, security type None, ClientInit (shared), ServerInit, then one
// FramebufferUpdateRequest of the whole screen and the header of the FramebufferUpdate that
// answers it. It returns ServerInit's size and desktop name.
func Handshake(in io.Writer, out io.Reader) (w, h int, name string, err error) {
	read := func(n int) []byte {
		b := make([]byte, n)
		if err == nil {
			_, err = io.ReadFull(out, b)
		}
		return b
	}
	write := func(b ...byte) {
		if err == nil {
			_, err = in.Write(b)
		}
	}
	if v := read(12); err == nil && string(v) != "RFB 003.008\n" {
		return 0, 0, "", fmt.Errorf("server version %q", v)
	}
	write([]byte("RFB 003.008\n")...)
	types := read(int(read(1)[0]))
	if err == nil && !bytes.Contains(types, []byte{1}) {
		return 0, 0, "", fmt.Errorf("security types %v lack None (1)", types)
	}
	write(1)
	if res := read(4); err == nil && binary.BigEndian.Uint32(res) != 0 {
		return 0, 0, "", fmt.Errorf("security result %v", res)
	}
	write(1) // ClientInit: shared
	si := read(24)
	w, h = int(binary.BigEndian.Uint16(si[0:])), int(binary.BigEndian.Uint16(si[2:]))
	name = string(read(int(binary.BigEndian.Uint32(si[20:]))))
	req := []byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 0} // FramebufferUpdateRequest, not incremental, all
	binary.BigEndian.PutUint16(req[6:], uint16(w))
	binary.BigEndian.PutUint16(req[8:], uint16(h))
	write(req...)
	up := read(4 + 12) // FramebufferUpdate: type, padding, rectangles; the first's header
	rw, rh := binary.BigEndian.Uint16(up[8:]), binary.BigEndian.Uint16(up[10:])
	if err == nil && (up[0] != 0 || binary.BigEndian.Uint16(up[2:]) == 0 || rw == 0 || rh == 0 || int(rw) > w || int(rh) > h) {
		return 0, 0, "", fmt.Errorf("not a FramebufferUpdate of the screen: % x", up)
	}
	return w, h, name, err
}
