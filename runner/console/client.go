package console

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
)

// NoEscape turns off Connect's escape byte.
const NoEscape = -1

// SocketName is the console's socket in the runner's state directory.
const SocketName = "console.sock"

// Socket is where a runner with state directory stateDir serves the guest's console.
func Socket(stateDir string) string { return filepath.Join(stateDir, SocketName) }

// Connect attaches in and out to the guest's serial console, as `virtpod-runner console` in the
// runner's container: the console's recent history and then the live output go to out, and
// what is read from in goes to the guest, byte for byte. It returns nil when in ends, when the
// escape byte (unless NoEscape) is read from in — the byte is not sent — or when the console
// closes because the guest stopped.
func Connect(stateDir string, in io.Reader, out io.Writer, escape int) error {
	sock := Socket(stateDir)
	c, err := net.Dial("unix", sock)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no console at %s: the guest is not running (yet)", sock)
		}
		return fmt.Errorf("console %s: %w", sock, err)
	}
	defer c.Close()
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(out, c)
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
		done <- err
	}()
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := in.Read(buf)
			b := buf[:n]
			i := -1
			if escape != NoEscape {
				i = bytes.IndexByte(b, byte(escape))
			}
			if i >= 0 {
				b = b[:i]
			}
			if len(b) > 0 {
				if _, werr := c.Write(b); werr != nil {
					done <- nil // the console closed; the reader side reports why
					return
				}
			}
			if i >= 0 || err != nil {
				done <- nil
				return
			}
		}
	}()
	return <-done
}
