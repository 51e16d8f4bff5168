// Package vmctl is the vmctl command: which virtpod providers can run VMs where, and why not
// elsewhere, and enabling or disabling a provider class. Run is its only entry point; the
// report's shape and rendering stay inside, so only the command line and -o json/yaml are
// its interface.
package vmctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// pluginName is the binary name under which kubectl finds vmctl as a plugin.
const pluginName = "kubectl-virtpod"

// apiTimeout bounds each command's API calls, so an unreachable cluster fails instead of hanging.
const apiTimeout = 30 * time.Second

// exitError carries an exit code for a failure that has already been explained on stderr.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// app is one invocation: where output goes, the clock, and the connection flags.
type app struct {
	stdout, stderr io.Writer
	now            func() time.Time
	kubeconfig     string
	context        string
}

// Run executes vmctl with argv (argv[0] included) and returns the exit code; tests call it
// in-process.
func Run(argv []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr, now: time.Now}
	root := a.rootCmd(filepath.Base(argv[0]))
	root.SetArgs(argv[1:])
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
}

func (a *app) rootCmd(argv0 string) *cobra.Command {
	display := "vmctl"
	if argv0 == pluginName {
		display = "kubectl virtpod"
	}
	root := &cobra.Command{
		Use:   "vmctl",
		Short: "Inspect and manage virtpod's hypervisor providers",
		// The display name makes every usage line read `kubectl virtpod ...` under the plugin.
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: display},
		SilenceUsage:  true, // usage is for flag mistakes, not API errors
		SilenceErrors: true, // run prints errors once, its own way
	}
	root.PersistentFlags().StringVar(&a.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	root.PersistentFlags().StringVar(&a.context, "context", "", "the kubeconfig context to use")
	root.AddCommand(a.statusCmd(), a.providerCmd())
	root.AddCommand(a.startCmd(), a.stopCmd(), a.restartCmd())
	return root
}

// client connects the way kubectl does: --kubeconfig, else $KUBECONFIG, else ~/.kube/config
// (or in-cluster), with --context overriding the current context.
func (a *app) client() (client.Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = a.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: a.context}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.UserAgent = "vmctl"
	scheme := runtime.NewScheme()
	if err := vmv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

func (a *app) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), apiTimeout)
}

// oneLine flattens text for a table cell.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
