package vmctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"
)

func (a *app) sshCmd() *cobra.Command {
	var user string
	var port int
	c := &cobra.Command{
		Use:   "ssh VM [-- SSH-ARGS...]",
		Short: "Run ssh to a VM's guest through a port-forward",
		Long: `Forward a free local port to the guest's ssh port (22, or --port; it must be declared in
spec.guest.ports) as port-forward does, and run the local ssh client against it:

  ssh -p <local port> -o HostKeyAlias=<vm>.<namespace> [-l USER] localhost [SSH-ARGS...]

HostKeyAlias keeps the guest's host key under the VM's name, not under a changing localhost port.
Arguments after -- go to ssh (options or a command). vmctl exits with ssh's exit code.`,
		Example:           "  vmctl ssh web --user debian\n  vmctl ssh web --user debian -- uname -a\n  vmctl ssh web -- -i ~/.ssh/vm_key -l root",
		Args:              minArgs(1),
		ValidArgsFunction: a.completeVMs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if at := cmd.ArgsLenAtDash(); at > 1 || at < 0 && len(args) > 1 {
				return usageError{errors.New("ssh takes one VM; put ssh's own arguments after --")}
			}
			return a.ssh(args[0], user, port, args[1:])
		},
	}
	c.Flags().StringVarP(&user, "user", "l", "", "the guest user to log in as (ssh's -l)")
	c.Flags().IntVar(&port, "port", 22, "the guest's ssh port (must be in spec.guest.ports)")
	return c
}

func (a *app) ssh(name, user string, port int, sshArgs []string) error {
	sshBin, err := exec.LookPath("ssh")
	if err != nil {
		return errors.New("no ssh client in PATH: install OpenSSH's client")
	}
	ns, err := a.ns()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan uint16, 1)
	fwErr := make(chan error, 1)
	// The forwarder's own lines ("Forwarding from ...") would mix with the ssh session.
	quiet := *a
	quiet.stdout = discard{}
	go func() {
		fwErr <- quiet.portForward(ctx, name, []string{"0:" + strconv.Itoa(port)}, []string{"127.0.0.1"}, func(p []uint16) { ready <- p[0] })
	}()
	var local uint16
	select {
	case local = <-ready:
	case err := <-fwErr:
		if err == nil {
			err = errors.New("the port-forward ended before it was ready")
		}
		return err
	}
	args := []string{"-p", strconv.Itoa(int(local)), "-o", "HostKeyAlias=" + name + "." + ns}
	if user != "" {
		args = append(args, "-l", user)
	}
	args = append(append(args, "localhost"), sshArgs...)
	cmd := exec.Command(sshBin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.stdin, a.stdout, a.stderr
	// ssh handles the terminal's Ctrl-C itself; vmctl must not die of it first.
	signal.Ignore(os.Interrupt)
	defer signal.Reset(os.Interrupt)
	err = cmd.Run()
	cancel()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return exitError{code: ee.ExitCode()}
	default:
		return fmt.Errorf("running ssh: %w", err)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
