// Package virtiofs runs the guest's virtio-fs shares: one virtiofsd per --filesystem, without
// capabilities, started before the hypervisor on a socket the runner made, and a watch that
// ends the run when one of them dies.
package virtiofs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/runner/hypervisor"
)

// Shares are the virtiofsd processes serving the guest's --filesystem directories, one each.
type Shares struct {
	procs []*hypervisor.Process
	tags  []string
	// failed is closed when a virtiofsd ends while the guest still needs it; why says which.
	failed chan struct{}
	once   sync.Once
	why    string
}

// Start starts one virtiofsd per --filesystem, before QEMU, on a listening socket the
// runner made itself and hands over as fd 3: QEMU's connection waits in the socket's backlog
// until virtiofsd accepts it, so there is no race and no poll for a socket file.
//
// virtiofsd runs as the runner's user, without capabilities (the launcher drops them), with no
// sandbox of its own (a sandbox needs namespaces or chroot, which a restricted pod has not):
// the pod is its sandbox, and it sees only the volume it serves. It leaves the file limit as it
// is (raising it needs CAP_SYS_RESOURCE). --cache=auto lets the guest cache a file's data and
// attributes for a second, so a ConfigMap's update or a copied file shows within that.
func Start(cfg runnerconfig.Config, virtiofsd string, launcher []string, log *zap.Logger) (*Shares, []hypervisor.Share, error) {
	s := &Shares{failed: make(chan struct{})}
	if len(cfg.Filesystems) == 0 {
		return s, nil, nil
	}
	var fs []hypervisor.Share
	for _, f := range cfg.Filesystems {
		if st, err := os.Stat(f.Path); err != nil || !st.IsDir() {
			s.Stop()
			return nil, nil, fmt.Errorf("--filesystem %s: %s is not a directory: %v", f.Tag, f.Path, err)
		}
		sock := filepath.Join(cfg.StateDir, "fs-"+f.Tag+".sock")
		_ = os.Remove(sock)
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			s.Stop()
			return nil, nil, fmt.Errorf("--filesystem %s: %w", f.Tag, err)
		}
		l.SetUnlinkOnClose(false) // the socket file stays for QEMU to connect to
		lf, err := l.File()
		_ = l.Close() // the duplicate in lf keeps the socket listening; virtiofsd owns it now
		if err != nil {
			s.Stop()
			return nil, nil, fmt.Errorf("--filesystem %s: %w", f.Tag, err)
		}
		args := []string{"--fd=3", "--shared-dir=" + f.Path, "--sandbox=none", "--cache=auto", "--rlimit-nofile=0", "--log-level=warn"}
		if f.ReadOnly {
			args = append(args, "--readonly")
		}
		argv := append(append(daemonLauncher(launcher), virtiofsd), args...)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.ExtraFiles = []*os.File{lf}
		p := &hypervisor.Process{}
		err = p.Start(cmd)
		_ = lf.Close()
		if err != nil {
			s.Stop()
			return nil, nil, fmt.Errorf("--filesystem %s: start %s: %w", f.Tag, binaries.VirtiofsdName, err)
		}
		log.Info("virtiofsd serving", zap.String("tag", f.Tag), zap.String("dir", f.Path), zap.Bool("readOnly", f.ReadOnly), zap.String("socket", sock))
		s.procs, s.tags = append(s.procs, p), append(s.tags, f.Tag)
		fs = append(fs, hypervisor.Share{Tag: f.Tag, Socket: sock})
		go s.watch(p, f.Tag)
	}
	return s, fs, nil
}

// daemonLauncher is what starts virtiofsd: the launcher that drops every capability, as for
// QEMU, when the runner is not root (always, in a pod: Pod Security restricted). A root runner
// (a test's container) starts it directly: virtiofsd run as root insists on keeping the
// capabilities it serves a guest's root with, and drops the rest itself.
func daemonLauncher(launcher []string) []string {
	if os.Geteuid() == 0 {
		return nil
	}
	return append([]string{}, launcher...)
}

// watch records a virtiofsd that ended: the guest's share would hang, so the runner ends it.
func (s *Shares) watch(p *hypervisor.Process, tag string) {
	<-p.Done()
	s.once.Do(func() {
		s.why = fmt.Sprintf("the virtiofsd serving filesystem %s ended: %s", tag, p.Detail(binaries.VirtiofsdName))
		close(s.failed)
	})
}

// Stop ends every virtiofsd; QEMU has gone by then (or never started).
func (s *Shares) Stop() {
	for _, p := range s.procs {
		p.Kill()
	}
}

// shareWatch is the hypervisor seen through its shares: a virtiofsd that ends while the guest
// runs kills QEMU, and the exit detail then says which share's daemon went first.
type shareWatch struct {
	hypervisor.Hypervisor
	cause atomic.Pointer[string] // set when a share's end stopped the guest
}

// Watch is hv seen through its shares (shareWatch).
func Watch(hv hypervisor.Hypervisor, s *Shares, log *zap.Logger) hypervisor.Hypervisor {
	if len(s.procs) == 0 {
		return hv
	}
	w := &shareWatch{Hypervisor: hv}
	go func() {
		select {
		case <-s.failed:
			select {
			case <-hv.Exited(): // virtiofsd ends when QEMU, its client, has gone: no cause
				return
			default:
			}
			why := s.why
			w.cause.Store(&why)
			log.Error("a filesystem's daemon ended; stopping the guest", zap.String("why", why))
			hv.Kill()
		case <-hv.Exited():
		}
	}()
	return w
}

// Start says so when a share's end stopped QEMU before it was up.
func (w *shareWatch) Start(ctx context.Context) error {
	err := w.Hypervisor.Start(ctx)
	if why := w.cause.Load(); err != nil && why != nil {
		return errors.New(*why)
	}
	return err
}

func (w *shareWatch) ExitDetail() string {
	if why := w.cause.Load(); why != nil {
		return *why
	}
	return w.Hypervisor.ExitDetail()
}
