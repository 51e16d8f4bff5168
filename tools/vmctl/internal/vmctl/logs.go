package vmctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

func (a *app) logsCmd() *cobra.Command {
	var follow bool
	var tail int64
	c := &cobra.Command{
		Use:   "logs VM",
		Short: "Print a VM's console log (the guest's serial output and the runner's messages)",
		Long: `Print the VM's console log: its runner container's log, which holds everything the guest
wrote on its serial console since the runner pod started, and the runner's own messages. With -f,
keep printing as the guest writes, until Ctrl-C or the pod ends. Needs your permission to get
pods/log in the VM's namespace. A VM whose pod has ended still shows that pod's log.`,
		Example:           "  vmctl logs web\n  vmctl logs -f web\n  vmctl logs --tail 20 web",
		Args:              exactArgs(1),
		ValidArgsFunction: a.completeVMs,
		RunE: func(_ *cobra.Command, args []string) error {
			return a.logs(args[0], follow, tail)
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new output")
	c.Flags().Int64Var(&tail, "tail", -1, "print only the last N lines (-1: all)")
	return c
}

func (a *app) logs(name string, follow bool, tail int64) error {
	cn, r, err := a.findRunner(name, false)
	if err != nil {
		return err
	}
	opts := &corev1.PodLogOptions{Container: vmv1.RunnerContainer, Follow: follow}
	if tail >= 0 {
		opts.TailLines = &tail
	}
	sctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if !follow {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(sctx, apiTimeout)
		defer cancel()
	}
	s, err := cn.cs.CoreV1().Pods(r.pod.Namespace).GetLogs(r.pod.Name, opts).Stream(sctx)
	if err != nil {
		return fmt.Errorf("logs of VM %s: %s", r, oneLine(err.Error()))
	}
	defer s.Close()
	if _, err := io.Copy(a.stdout, s); err != nil && sctx.Err() == nil {
		return fmt.Errorf("logs of VM %s: %s", r, oneLine(err.Error()))
	}
	return nil
}
