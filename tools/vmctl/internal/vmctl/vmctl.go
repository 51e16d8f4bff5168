// Package vmctl is the vmctl command: which virtpod providers can run VMs where, and why not
// elsewhere; enabling or disabling a provider class; and a VM's day-2 verbs — its serial
// console, its console log, port-forwarding to the guest and ssh. Run is its only entry point;
// the report's shape and rendering stay inside, so only the command line and -o json/yaml are
// its interface.
package vmctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// pluginName is the binary name under which kubectl finds vmctl as a plugin.
const pluginName = "kubectl-virtpod"

// apiTimeout bounds each command's API calls, so an unreachable cluster fails instead of hanging.
// Streams (a console, a port-forward, logs -f) are not bounded: they last as long as the user.
const apiTimeout = 30 * time.Second

// Exit codes (docs/vmctl.md). `vmctl ssh` exits with ssh's own code instead.
const (
	exitOK     = 0
	exitFailed = 1 // the command failed: the API server refused, the VM is missing or not running, ...
	exitUsage  = 2 // the command line is wrong: unknown verb or flag, wrong number of arguments
)

// exitError carries an exit code for a failure that has already been explained on stderr.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is a mistake in the command line.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// app is one invocation: its streams, the clock, and the connection flags.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	now            func() time.Time
	kubeconfig     string
	context        string
	namespace      string
}

// Run executes vmctl with argv (argv[0] included), the process's standard input and the given
// outputs, and returns the exit code; tests call it in-process.
func Run(argv []string, stdout, stderr io.Writer) int {
	return RunIO(argv, os.Stdin, stdout, stderr)
}

// RunIO is Run with its standard input given.
func RunIO(argv []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, now: time.Now}
	root := a.rootCmd(filepath.Base(argv[0]))
	root.SetArgs(argv[1:])
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	var ee exitError
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "error: %v\nSee '%s --help'.\n", err, displayName(root))
		return exitUsage
	default:
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitFailed
	}
}

func displayName(root *cobra.Command) string {
	if n := root.Annotations[cobra.CommandDisplayNameAnnotation]; n != "" {
		return n
	}
	return root.Name()
}

func (a *app) rootCmd(argv0 string) *cobra.Command {
	display := "vmctl"
	if argv0 == pluginName {
		display = "kubectl virtpod"
	}
	root := &cobra.Command{
		Use:   "vmctl",
		Short: "Manage virtpod VMs and inspect their hypervisor providers",
		Long: `vmctl manages virtpod VirtualMachines and the hypervisor providers they run on.
It connects like kubectl (--kubeconfig, --context, -n) and acts with your own permissions.
Exit codes: 0 done, 1 failed (the reason on stderr), 2 wrong command line; ssh passes on ssh's.`,
		// The display name makes every usage line read `kubectl virtpod ...` under the plugin.
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: display},
		SilenceUsage:  true, // usage is for flag mistakes, not API errors
		SilenceErrors: true, // run prints errors once, its own way
		Args:          cobra.ArbitraryArgs,
		// Runnable only to tell an unknown verb (a usage error, exit 2) from a bare `vmctl`.
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], display)
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += fmt.Sprintf("; did you mean %q?", s[0])
			}
			return usageError{errors.New(msg)}
		},
	}
	root.SuggestionsMinimumDistance = 2
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	f := root.PersistentFlags()
	f.StringVar(&a.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&a.context, "context", "", "the kubeconfig context to use")
	f.StringVarP(&a.namespace, "namespace", "n", "", "the namespace of the VM (default: the context's namespace, else default)")
	root.AddCommand(a.statusCmd(), a.providerCmd())
	root.AddCommand(a.consoleCmd(), a.logsCmd(), a.portForwardCmd(), a.sshCmd(), a.topCmd(), a.screenshotCmd(), a.vncCmd())
	_ = root.RegisterFlagCompletionFunc("namespace", a.completeNamespaces)
	root.AddCommand(a.startCmd(), a.stopCmd(), a.restartCmd(), a.suspendCmd(), a.resumeCmd())
	root.AddCommand(a.snapshotCmd(), a.snapshotsCmd(), a.restoreCmd(), a.cloneCmd(), a.exportCmd())
	root.AddCommand(a.diskCmd())
	return root
}

// exactArgs is cobra.ExactArgs whose complaint is a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// maxArgs is cobra.MaximumNArgs whose complaint is a usage error.
func maxArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.MaximumNArgs(n)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// minArgs is cobra.MinimumNArgs whose complaint is a usage error.
func minArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.MinimumNArgs(n)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// clientConfig loads the kubeconfig the way kubectl does: --kubeconfig, else $KUBECONFIG, else
// ~/.kube/config (or in-cluster), with --context and -n overriding the current context's.
func (a *app) clientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = a.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: a.context, Context: clientcmdapi.Context{Namespace: a.namespace}}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
}

func (a *app) restConfig() (*rest.Config, error) {
	cfg, err := a.clientConfig().ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.UserAgent = "vmctl"
	return cfg, nil
}

// ns is the namespace VMs are looked up in.
func (a *app) ns() (string, error) {
	ns, _, err := a.clientConfig().Namespace()
	if err != nil {
		return "", fmt.Errorf("loading kubeconfig: %w", err)
	}
	return ns, nil
}

// client connects for reading and patching virtpod's objects.
func (a *app) client() (client.Client, error) {
	cfg, err := a.restConfig()
	if err != nil {
		return nil, err
	}
	return newClient(cfg)
}

func newClient(cfg *rest.Config) (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := vmv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// conn is everything the VM verbs use: the namespace, a client for VMs and a clientset for
// pods, logs, exec and port-forward.
type conn struct {
	cfg *rest.Config
	ns  string
	c   client.Client
	cs  kubernetes.Interface
}

func (a *app) connect() (*conn, error) {
	cfg, err := a.restConfig()
	if err != nil {
		return nil, err
	}
	ns, err := a.ns()
	if err != nil {
		return nil, err
	}
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &conn{cfg: cfg, ns: ns, c: c, cs: cs}, nil
}

func (a *app) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), apiTimeout)
}

// oneLine flattens text for a table cell or a one-line error.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
