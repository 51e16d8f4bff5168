package vmctl

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/yaml"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

func (a *app) statusCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each provider class and each node's hypervisors, and why a provider cannot run somewhere",
		Long: `Show each ProviderClass (enabled, available, ready/total nodes, versions, message) and each
node agent's report (KVM, emulation, each provider's version or why it is missing, heartbeat).
Exits 1 when the default provider class is missing or not Available.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" && output != "yaml" {
				return fmt.Errorf("--output must be table, json or yaml, not %q", output)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx, cancel := a.ctx()
			defer cancel()
			classes := &vmv1.ProviderClassList{}
			if err := c.List(ctx, classes); err != nil {
				return apiError("providerclasses", "listing providerclasses", err)
			}
			nodes := &vmv1.HypervisorNodeList{}
			if err := c.List(ctx, nodes); err != nil {
				return apiError("hypervisornodes", "listing hypervisornodes", err)
			}
			r := buildReport(classes.Items, nodes.Items, a.now())
			if err := write(a, output, r); err != nil {
				return err
			}
			if r.Problem != "" {
				fmt.Fprintln(a.stderr, "vmctl:", r.Problem)
				return exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

func write(a *app, output string, r report) error {
	switch output {
	case "json":
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.stdout, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(r)
		if err != nil {
			return err
		}
		_, err = a.stdout.Write(b)
		return err
	default:
		return renderTable(a.stdout, r)
	}
}

// apiError names the likely cause when virtpod's CRDs are missing, the commonest first-run failure.
func apiError(resource, doing string, err error) error {
	if meta.IsNoMatchError(err) {
		return fmt.Errorf("the %s.%s API is not in this cluster; is virtpod installed (its CRDs applied)?", resource, vmv1.GroupVersion.Group)
	}
	return fmt.Errorf("%s: %w", doing, err)
}
