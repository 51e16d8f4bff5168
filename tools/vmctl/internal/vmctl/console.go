package vmctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	utilexec "k8s.io/utils/exec"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// escapeKey detaches from a console: Ctrl-], as telnet's and virsh's.
const (
	escapeKey     = 0x1d
	escapeCaret   = "^]"
	escapeDisplay = "Ctrl-]"
)

// detachGrace is how long vmctl waits, after the escape key, for the runner's console command
// to end the exec itself before it drops the connection.
const detachGrace = 3 * time.Second

func (a *app) consoleCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "console VM",
		Short: "Attach to a VM's serial console; detach with " + escapeDisplay,
		Long: `Attach this terminal to the VM's serial console: the console's recent output (its last
64 KiB) first, then the live output; every key goes to the guest, Ctrl-C included. Detach with
` + escapeDisplay + `. Any number of consoles may be attached to one VM at once.

It runs ` + "`virtpod-runner console`" + ` in the VM's runner pod through the API server's pod exec, so it
needs your permission to create pods/exec in the VM's namespace; the VM must have a running
runner pod. Without a terminal on stdin, stdin and stdout are plain byte streams.`,
		Example:           "  vmctl console web\n  vmctl -n prod console db-0",
		Args:              exactArgs(1),
		ValidArgsFunction: a.completeVMs,
		RunE: func(_ *cobra.Command, args []string) error {
			return a.console(args[0])
		},
	}
}

func (a *app) console(name string) error {
	cn, r, err := a.findRunner(name, true)
	if err != nil {
		return err
	}
	fd, tty := terminalFD(a.stdin)
	exec, err := runnerExecutor(cn, r, corev1.PodExecOptions{
		Command: []string{podspec.RunnerBinary, "console", "--state-dir=" + runnerconfig.DefaultStateDir, "--escape=" + escapeCaret},
		Stdin:   true, Stdout: true, Stderr: !tty, TTY: tty,
	})
	if err != nil {
		return err
	}

	sctx, stop := context.WithCancel(context.Background())
	defer stop()
	in := &escapeReader{r: a.stdin, detached: make(chan struct{})}
	go func() {
		// The runner's console ends the exec when it reads the escape key; if the connection
		// is stuck, drop it.
		select {
		case <-in.detached:
			time.Sleep(detachGrace)
			stop()
		case <-sctx.Done():
		}
	}()
	// The runner's console sends its history as soon as it is attached: the first byte is the
	// moment to say so. An exec the API server refuses prints only its one-line error.
	nl := "\n"
	if tty {
		nl = "\r\n"
	}
	out := &firstWrite{w: a.stdout, first: func() {
		fmt.Fprintf(a.stderr, "Connected to the console of VM %s (pod %s); detach with %s.%s", r, r.pod.Name, escapeDisplay, nl)
	}}
	opts := remotecommand.StreamOptions{Stdin: in, Stdout: out, Tty: tty}
	if !tty {
		opts.Stderr = a.stderr
	}
	if tty {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("raw terminal: %w", err)
		}
		defer term.Restore(fd, old) //nolint:errcheck
		sizes := newSizeQueue(fd)
		defer sizes.stop()
		opts.TerminalSizeQueue = sizes
	}
	err = exec.StreamWithContext(sctx, opts)
	select {
	case <-in.detached:
		if tty {
			fmt.Fprint(a.stderr, "\r\n")
		}
		fmt.Fprintf(a.stderr, "Detached from the console of VM %s.\n", r)
		return nil
	default:
	}
	if err != nil {
		return streamError("console", r, err)
	}
	return nil
}

// runnerExecutor runs opts' command in r's runner container through the API server's pod exec.
func runnerExecutor(cn *conn, r runner, opts corev1.PodExecOptions) (remotecommand.Executor, error) {
	opts.Container = vmv1.RunnerContainer
	u := cn.cs.CoreV1().RESTClient().Post().Namespace(r.pod.Namespace).Resource("pods").Name(r.pod.Name).SubResource("exec").
		VersionedParams(&opts, scheme.ParameterCodec).URL()
	return executor(cn.cfg, u)
}

// executor follows kubectl: WebSocket first, SPDY for API servers that cannot upgrade to it.
func executor(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error) {
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", u)
	if err != nil {
		return nil, err
	}
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// streamError makes a failed exec or port-forward one line that names the VM.
func streamError(verb string, r runner, err error) error {
	var code utilexec.CodeExitError
	if errors.As(err, &code) {
		return fmt.Errorf("%s of VM %s: the runner's console command ended with exit code %d", verb, r, code.Code)
	}
	return fmt.Errorf("%s of VM %s: %s", verb, r, oneLine(err.Error()))
}

// terminalFD tells whether in is a terminal, and its descriptor.
func terminalFD(in io.Reader) (int, bool) {
	f, ok := in.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	return int(f.Fd()), true
}

// escapeReader passes input through up to and including the escape key, then ends: the
// runner's console command, which sees the key too, detaches without sending it to the guest.
type escapeReader struct {
	r        io.Reader
	once     sync.Once
	detached chan struct{}
	done     bool
}

func (e *escapeReader) Read(p []byte) (int, error) {
	if e.done {
		return 0, io.EOF
	}
	n, err := e.r.Read(p)
	if i := bytes.IndexByte(p[:n], escapeKey); i >= 0 {
		e.done = true
		e.once.Do(func() { close(e.detached) })
		return i + 1, nil
	}
	return n, err
}

// firstWrite calls first before the first byte written through it.
type firstWrite struct {
	w     io.Writer
	once  sync.Once
	first func()
}

func (f *firstWrite) Write(p []byte) (int, error) {
	f.once.Do(f.first)
	return f.w.Write(p)
}

// sizeQueue sends the terminal's size when the console starts and whenever it changes.
type sizeQueue struct {
	fd    int
	sigs  chan os.Signal
	sizes chan remotecommand.TerminalSize
	quit  chan struct{}
}

func newSizeQueue(fd int) *sizeQueue {
	q := &sizeQueue{fd: fd, sigs: make(chan os.Signal, 1), sizes: make(chan remotecommand.TerminalSize, 1), quit: make(chan struct{})}
	signal.Notify(q.sigs, syscall.SIGWINCH)
	q.send()
	go func() {
		for {
			select {
			case <-q.sigs:
				q.send()
			case <-q.quit:
				return
			}
		}
	}()
	return q
}

func (q *sizeQueue) send() {
	w, h, err := term.GetSize(q.fd)
	if err != nil {
		return
	}
	// Only the latest size matters: an unread one is replaced (one sender, so this cannot block).
	select {
	case <-q.sizes:
	default:
	}
	q.sizes <- remotecommand.TerminalSize{Width: uint16(w), Height: uint16(h)}
}

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	select {
	case s := <-q.sizes:
		return &s
	case <-q.quit:
		return nil
	}
}

func (q *sizeQueue) stop() {
	signal.Stop(q.sigs)
	close(q.quit)
}
