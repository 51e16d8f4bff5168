// Command virtpod-runner is the process in a VM's pod: `virtpod-runner [flags]` boots and
// supervises the guest (package runner), `virtpod-runner probe` is the kubelet's exec probe,
// `virtpod-runner kvm-probe` prints runner/kvm's verdict on this node's KVM,
// `virtpod-runner console` attaches a terminal to the guest's serial console (what `vmctl
// console` runs through the API server's pod exec), `virtpod-runner screenshot` writes the
// guest's screen as a PNG, and `virtpod-runner vnc` connects stdin and stdout to its VNC display
// (what `vmctl screenshot` and `vmctl vnc` run the same way). `virtpod-runner disk-target` and
// `virtpod-runner disk-copy` are a VM snapshot's copier pod (runner/diskcopy, diskcopy.go);
// `virtpod-runner disk-serve` is a hotplugged disk's attachment pod (diskserve.go).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"golang.org/x/term"

	"github.com/virtpod/virtpod/pkg/dropcaps"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/runner/console"
	"github.com/virtpod/virtpod/runner/kvm"
)

func main() {
	os.Exit(execute(os.Args[1:]))
}

func execute(args []string) int {
	code := 0
	var cfg runnerconfig.Config
	o := runner.Options{Stdout: os.Stdout}
	var terminationLog string
	root := &cobra.Command{
		Use:           "runner",
		Short:         "Boot and supervise one VM's guest inside its pod",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Defaults()
			code = runGuest(cfg, o, terminationLog)
			return nil
		},
	}
	gofs := flag.NewFlagSet("config", flag.ContinueOnError)
	cfg.Bind(gofs)
	root.Flags().AddGoFlagSet(gofs)
	f := root.Flags()
	// The environment lets tests and images move a binary without changing the pod's flags.
	bins := binaries.FromEnv()
	f.StringVar(&o.QEMUBinary, "qemu-binary", bins.QEMU, "path of "+binaries.QEMUName+" (env "+binaries.EnvQEMU+")")
	f.StringVar(&o.QEMUImgBinary, "qemu-img-binary", bins.QEMUImg, "path of "+binaries.QEMUImgName+" (env "+binaries.EnvQEMUImg+")")
	f.StringVar(&o.CloudHypervisorBinary, "cloud-hypervisor-binary", bins.CloudHypervisor, "path of "+binaries.CloudHypervisorName+" (env "+binaries.EnvCloudHypervisor+")")
	f.StringVar(&o.VirtiofsdBinary, "virtiofsd-binary", bins.Virtiofsd, "path of "+binaries.VirtiofsdName+", which serves --filesystem shares (env "+binaries.EnvVirtiofsd+")")
	f.StringVar(&o.KVMDevice, "kvm-device", kvm.DefaultDevice, "KVM device node")
	f.StringVar(&o.CPUModel, "cpu-model", "", "QEMU CPU model (default: host under kvm, QEMU's default under tcg)")
	f.BoolVar(&o.SkipKVMProbe, "skip-kvm-probe", false, "under kvm, boot without probing KVM first (the boot watchdog still applies)")
	f.StringVar(&o.ResolvConf, "resolv-conf", "/etc/resolv.conf", "the pod's resolver configuration, passed on to the guest")
	f.DurationVar(&o.BootWatchdog, "boot-watchdog", 60*time.Second, "under kvm, fail when the guest kernel prints nothing on its console for this long (0 disables)")
	f.StringVar(&terminationLog, "termination-log", "/dev/termination-log", "file the exit reason is written to (the container's terminationMessagePath)")

	root.CompletionOptions.DisableDefaultCmd = true
	if self, err := os.Executable(); err == nil {
		o.Launcher = []string{self, execUnprivilegedName}
	}
	root.AddCommand(probeCommand(&code), kvmProbeCommand(&code), consoleCommand(), screenshotCommand(), vncCommand(), execUnprivilegedCommand(),
		diskTargetCommand(&code), diskCopyCommand(&code), diskServeCommand(&code))
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "runner:", err)
		return runner.ExitError
	}
	return code
}

func runGuest(cfg runnerconfig.Config, o runner.Options, terminationLog string) int {
	zc := zap.NewProductionConfig()
	zc.Sampling = nil
	log, err := zc.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "runner: logger:", err)
		return runner.ExitError
	}
	defer log.Sync() //nolint:errcheck
	o.Log = log
	// A closed stdout must not kill the runner (and with it the guest): console writes just fail.
	signal.Ignore(syscall.SIGPIPE)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	o.Signals = sigs

	out := runner.Run(context.Background(), cfg, o)
	if out.Code == runner.ExitOK {
		log.Info("runner done", zap.String("reason", out.Message))
	} else {
		log.Error("runner failed", zap.Int("exitCode", out.Code), zap.String("reason", out.Message))
		// Plain text on stderr too, so the reason reads well in `kubectl logs` without a JSON parser.
		fmt.Fprintln(os.Stderr, out.Message)
	}
	if err := runner.WriteTerminationMessage(terminationLog, out.Message); err != nil {
		log.Warn("could not write the termination message", zap.String("path", terminationLog), zap.Error(err))
	}
	return out.Code
}

const execUnprivilegedName = "exec-unprivileged"

// execUnprivilegedCommand runs a command without capabilities: how the runner starts QEMU.
func execUnprivilegedCommand() *cobra.Command {
	return &cobra.Command{
		Use:                execUnprivilegedName + " COMMAND [ARG...]",
		Short:              "Run COMMAND with no capabilities and no_new_privs (how the runner starts QEMU)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			return dropcaps.Exec(args) // returns only on failure
		},
	}
}

// probeCommand is the kubelet's exec probe: the runner's HTTP endpoint is a unix socket in the
// state directory (the guest owns the pod IP, and every loopback port may be one the runner
// relays to the guest), so an HTTP probe from the kubelet cannot reach it.
func probeCommand(code *int) *cobra.Command {
	var addr, stateDir, path string
	var timeout time.Duration
	var print bool
	c := &cobra.Command{
		Use:   "probe",
		Short: "Exit 0 when the runner's /readyz (or --path) answers 200",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			network, address := runnerconfig.HTTPEndpoint(addr, stateDir)
			host := address
			var d net.Dialer
			client := &http.Client{Timeout: timeout, Transport: &http.Transport{
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					return d.DialContext(ctx, network, address)
				},
			}}
			if network == "unix" {
				host = "runner"
			}
			resp, err := client.Get("http://" + host + path)
			if err != nil {
				fmt.Fprintln(os.Stderr, "probe:", err)
				*code = 1
				return nil
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			if print {
				_, _ = os.Stdout.Write(body)
			}
			if resp.StatusCode != http.StatusOK {
				// The body's first line is the reason (the guest's state, or its readiness
				// probe's failure): the kubelet shows it in the pod's Unhealthy event.
				line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
				if line == "" || print {
					line = fmt.Sprintf("probe: %s answered %s", path, resp.Status)
				}
				fmt.Fprintln(os.Stderr, line)
				*code = 1
			}
			return nil
		},
	}
	c.Flags().StringVar(&addr, "http-addr", runnerconfig.DefaultHTTPAddr, "the runner's --http-addr")
	c.Flags().StringVar(&stateDir, "state-dir", runnerconfig.DefaultStateDir, "the runner's --state-dir (for a unix: --http-addr)")
	c.Flags().StringVar(&path, "path", "/readyz", "endpoint to check: /readyz (the guest runs and passes its readiness probe), /startedz (the guest runs) or /healthz (the runner answers)")
	c.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "how long to wait for an answer")
	c.Flags().BoolVar(&print, "print", false, "print the answer's body (e.g. with --path=/status)")
	return c
}

// consoleCommand attaches stdin and stdout to the guest's serial console. On a terminal it puts
// the terminal in raw mode, so every key (Ctrl-C included) reaches the guest, whose own line
// discipline echoes and edits.
func consoleCommand() *cobra.Command {
	var stateDir, escape string
	c := &cobra.Command{
		Use:   "console",
		Short: "Attach stdin and stdout to the guest's serial console (what `vmctl console` runs in the pod)",
		Long: `Attach stdin and stdout to the guest's serial console: first the console's recent output
(its last 64 KiB), then the live output; every byte read from stdin goes to the guest. Ends when
stdin ends, when the --escape key is read, or when the guest stops. Any number may be attached.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			esc, err := parseEscape(escape)
			if err != nil {
				return err
			}
			if fd := int(os.Stdin.Fd()); term.IsTerminal(fd) {
				old, err := term.MakeRaw(fd)
				if err != nil {
					return fmt.Errorf("raw terminal: %w", err)
				}
				defer term.Restore(fd, old) //nolint:errcheck
			}
			return console.Connect(stateDir, os.Stdin, os.Stdout, esc)
		},
	}
	c.Flags().StringVar(&stateDir, "state-dir", runnerconfig.DefaultStateDir, "the runner's --state-dir")
	c.Flags().StringVar(&escape, "escape", "none", "a key that detaches instead of going to the guest: ^X for Ctrl-X (vmctl passes ^]), or none")
	return c
}

// parseEscape reads "none" or caret notation (^] is 0x1d).
func parseEscape(s string) (int, error) {
	if s == "none" || s == "" {
		return console.NoEscape, nil
	}
	if len(s) == 2 && s[0] == '^' && s[1] >= '@' && s[1] <= '_' {
		return int(s[1] - '@'), nil
	}
	return 0, fmt.Errorf("--escape %q: want ^X (a control key, ^@ to ^_) or none", s)
}

// kvmProbeCommand runs the KVM probe and prints its result as JSON; exit 0 when usable.
func kvmProbeCommand(code *int) *cobra.Command {
	var device string
	c := &cobra.Command{
		Use:   "kvm-probe",
		Short: "Check that this node's KVM can run a guest",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			res := kvm.Probe(context.Background(), kvm.Options{Device: device})
			b, _ := json.MarshalIndent(res, "", "  ")
			fmt.Println(string(b))
			if !res.Usable {
				*code = 1
			}
			return nil
		},
	}
	c.Flags().StringVar(&device, "device", kvm.DefaultDevice, "KVM device node")
	return c
}
