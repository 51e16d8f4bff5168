package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// screenshotCommand writes the guest's screen as a PNG to stdout: GET /v1/screenshot on the
// control socket (what `vmctl screenshot` runs in the pod).
func screenshotCommand() *cobra.Command {
	var sock string
	c := &cobra.Command{
		Use:   "screenshot",
		Short: "Write the guest's screen to stdout as a PNG (what `vmctl screenshot` runs in the pod)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return screenshot(sock, os.Stdout)
		},
	}
	c.Flags().StringVar(&sock, "control-socket", runnerconfig.DefaultControlSocket, "the runner's --control-socket")
	return c
}

func screenshot(sock string, out io.Writer) error {
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	resp, err := client.Get("http://runner" + controlapi.ScreenshotPath)
	if err != nil {
		return fmt.Errorf("screenshot: the runner's control socket: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(body))
		}
		return fmt.Errorf("screenshot: %s: %s", resp.Status, e.Error)
	}
	_, err = io.Copy(out, resp.Body)
	return err
}

// vncCommand connects stdin and stdout to the guest's VNC display, a unix socket in the state
// directory: `vmctl vnc` bridges a local TCP port to it through the pod's exec.
func vncCommand() *cobra.Command {
	var stateDir string
	c := &cobra.Command{
		Use:   "vnc",
		Short: "Connect stdin and stdout to the guest's VNC display (what `vmctl vnc` runs in the pod)",
		Long: `Connect stdin and stdout to the guest's VNC display: the bytes of one VNC (RFB) session,
unencrypted and without a password (only who may exec into the runner pod reaches it). Ends when
stdin ends or the display closes.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return bridge(hypervisor.VNCSocket(stateDir), os.Stdin, os.Stdout)
		},
	}
	c.Flags().StringVar(&stateDir, "state-dir", runnerconfig.DefaultStateDir, "the runner's --state-dir")
	return c
}

// bridge copies in to the unix socket at sock and the socket to out. It ends when the socket
// closes; once in ends, the server is told (a half close) and has a moment to finish.
func bridge(sock string, in io.Reader, out io.Writer) error {
	conn, err := net.Dial("unix", sock)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no display at %s: the guest has no display (spec.guest.display None), or is not running (yet)", sock)
		}
		return fmt.Errorf("display %s: %w", sock, err)
	}
	defer conn.Close()
	sent, received := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := io.Copy(conn, in)
		_ = conn.(*net.UnixConn).CloseWrite()
		sent <- err
	}()
	go func() {
		_, err := io.Copy(out, conn)
		received <- err
	}()
	select {
	case err = <-received:
	case err = <-sent:
		select {
		case rerr := <-received:
			err = errors.Join(err, rerr)
		case <-time.After(5 * time.Second):
		}
	}
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
