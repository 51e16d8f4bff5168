package vmctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

func (a *app) providerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "provider",
		Short: "Enable or disable a ProviderClass",
	}
	enable := &cobra.Command{
		Use:   "enable NAME",
		Short: "Let new VMs of the ProviderClass NAME start again",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			// null removes the field: a stale reason must not outlive the disable it explained.
			return a.patchClass(args[0], map[string]any{"enabled": true, "disabledReason": nil},
				fmt.Sprintf("providerclass %s enabled\n", args[0]))
		},
	}
	var reason string
	disable := &cobra.Command{
		Use:   "disable NAME --reason TEXT",
		Short: "Stop new VMs of the ProviderClass NAME from starting; running VMs keep running",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Checked here, not with MarkFlagRequired, so an empty --reason "" is refused too.
			if strings.TrimSpace(reason) == "" {
				return errors.New(`--reason is required: say why, e.g. --reason "qemu 9.0 crashes on resume"; VMs it blocks show it`)
			}
			return a.patchClass(args[0], map[string]any{"enabled": false, "disabledReason": reason},
				fmt.Sprintf("providerclass %s disabled: %s\n", args[0], reason))
		},
	}
	disable.Flags().StringVar(&reason, "reason", "", "why the class is disabled (required); shown on the VMs it blocks")
	cmd.AddCommand(enable, disable)
	return cmd
}

// patchClass sends a JSON merge patch of spec: only the fields named change, so a concurrent
// edit of the rest of the class (or its status) is never overwritten.
func (a *app) patchClass(name string, spec map[string]any, done string) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return err
	}
	ctx, cancel := a.ctx()
	defer cancel()
	pc := &vmv1.ProviderClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Patch(ctx, pc, client.RawPatch(types.MergePatchType, body)); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("ProviderClass %q not found; list the classes with `vmctl status` or `kubectl get providerclasses`", name)
		}
		return apiError("providerclasses", fmt.Sprintf("patching ProviderClass %q", name), err)
	}
	_, err = fmt.Fprint(a.stdout, done)
	return err
}
