package vmctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

func (a *app) screenshotCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "screenshot VM -o FILE.png",
		Short: "Save a PNG of a VM's screen",
		Long: `Save a PNG of what the VM's display shows now: a firmware menu, a bootloader, a desktop, or the
text console. -o - writes it to stdout.

It runs ` + "`virtpod-runner screenshot`" + ` in the VM's runner pod through the API server's pod exec (as
vmctl console does), so it needs pods/exec in the VM's namespace; the VM must run and have a
display (spec.guest.display is not None).`,
		Example:           "  vmctl screenshot web -o web.png\n  vmctl screenshot web -o - | display",
		Args:              exactArgs(1),
		ValidArgsFunction: a.completeVMs,
		RunE: func(_ *cobra.Command, args []string) error {
			if out == "" {
				return usageError{errors.New("-o FILE.png is required (- for stdout)")}
			}
			return a.screenshot(args[0], out)
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "where to write the PNG (- for stdout)")
	return c
}

func (a *app) screenshot(name, out string) error {
	var buf, errBuf bytes.Buffer
	r, err := a.runnerExec(context.Background(), name, []string{podspec.RunnerBinary, "screenshot"}, nil, &buf, &errBuf)
	if err != nil {
		if msg := bytes.TrimSpace(errBuf.Bytes()); len(msg) > 0 {
			return fmt.Errorf("screenshot of VM %s: %s", r, oneLine(string(msg)))
		}
		return streamError("screenshot", r, err)
	}
	img, err := png.DecodeConfig(bytes.NewReader(buf.Bytes()))
	if err != nil {
		return fmt.Errorf("screenshot of VM %s: the runner sent no PNG: %v", r, err)
	}
	if out == "-" {
		_, err = a.stdout.Write(buf.Bytes())
		return err
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "Saved the screen of VM %s (%dx%d) to %s.\n", r, img.Width, img.Height, out)
	return nil
}

func (a *app) vncCmd() *cobra.Command {
	var address string
	var port int
	c := &cobra.Command{
		Use:   "vnc VM",
		Short: "Serve a VM's display on a local port for any VNC viewer",
		Long: `Listen on a local port (--port, default a free one; --address, default localhost) and join
each VNC viewer that connects to the VM's display, until Ctrl-C. The runner's QEMU serves VNC
on a unix socket in the pod only, never on a port; each viewer's connection runs
` + "`virtpod-runner vnc`" + ` in the runner pod through the API server's pod exec, so it needs pods/exec
in the VM's namespace, as vmctl console does, and nothing on the VM's network.`,
		Example:           "  vmctl vnc web\n  vmctl vnc web --port 5901 & vncviewer localhost:5901",
		Args:              exactArgs(1),
		ValidArgsFunction: a.completeVMs,
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return a.vnc(ctx, args[0], net.JoinHostPort(address, strconv.Itoa(port)), nil)
		},
	}
	c.Flags().StringVar(&address, "address", "localhost", "the local address to listen on")
	c.Flags().IntVar(&port, "port", 0, "the local port to listen on (0: a free one)")
	return c
}

// vnc serves the VM's display on addr until ctx ends; ready, when set, gets the address once it
// listens.
func (a *app) vnc(ctx context.Context, name, addr string, ready func(net.Addr)) error {
	_, r, err := a.findRunner(name, true)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer l.Close()
	go func() { <-ctx.Done(); l.Close() }()
	fmt.Fprintf(a.stderr, "The display of VM %s is at %s: point a VNC viewer there; Ctrl-C ends.\n", r, l.Addr())
	if ready != nil {
		ready(l.Addr())
	}
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go func() {
			defer c.Close()
			var errBuf bytes.Buffer
			if _, err := a.runnerExec(ctx, name, []string{podspec.RunnerBinary, "vnc", "--state-dir=" + runnerconfig.DefaultStateDir}, c, c, &errBuf); err != nil && ctx.Err() == nil {
				fmt.Fprintf(a.stderr, "VNC of VM %s: %s %s\n", r, oneLine(err.Error()), oneLine(errBuf.String()))
			}
		}()
	}
}

// runnerExec runs command in the VM's runner container with the given streams (no TTY).
func (a *app) runnerExec(ctx context.Context, name string, command []string, in io.Reader, out, errOut io.Writer) (runner, error) {
	cn, r, err := a.findRunner(name, true)
	if err != nil {
		return r, err
	}
	exec, err := runnerExecutor(cn, r, corev1.PodExecOptions{Command: command, Stdin: in != nil, Stdout: true, Stderr: true})
	if err != nil {
		return r, err
	}
	return r, exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: in, Stdout: out, Stderr: errOut})
}
