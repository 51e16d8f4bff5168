// Package handoff is what a runner without capabilities hands the node agent, and what it gets
// back: its pod's network namespace, for the guest's network plumbing, and its bzImage kernel,
// for the PVH kernel the agent unpacks from it.
//
// The runner listens on vmv1.NetnsSocketName in its control directory. The agent connects;
// the runner sends one message, a Hello with a descriptor of its own network namespace
// (/proc/self/ns/net) attached (SCM_RIGHTS); unless the namespace is plumbed already, the agent
// plumbs it and answers with one Result, a JSON line. The runner keeps listening for its whole
// life and tells every later agent (one restarted, say) that it is plumbed, with the
// descriptor, so the agent can read the spoof guard's counters there.
//
// Why a descriptor from the runner rather than the CRI's sandbox status or /proc/<pid>/ns/net:
// the kernel lets an unprivileged process open only a namespace it is in, so the runner can
// name no namespace but its own pod's; the agent then needs no host PID namespace, no ptrace
// right and no container runtime socket. Which pod the socket is whose, the kubelet says
// (agent/podcontrol), and what to build comes from that pod's spec, never from the runner.
package handoff

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/virtpod/virtpod/pkg/network/guestnet"
)

// Hello is the runner's first and only message on a connection.
type Hello struct {
	// Plumbed: an agent plumbed the namespace before (this runner heard its Result).
	Plumbed bool `json:"plumbed"`
	// BzImage: a second descriptor follows the namespace's, the VM's kernel, a bzImage; the
	// agent answers with the PVH kernel inside it (Result.Kernel), which QEMU loads from the
	// file instead of holding a copy of the bzImage (pkg/kernel/kernelcache). Only in a Hello that is
	// not Plumbed: the guest's boot is what needs it.
	BzImage bool `json:"bzImage,omitempty"`
}

// Result is the agent's answer to a Hello that was not Plumbed: the plumbing, or why not.
type Result struct {
	Plumbing *guestnet.Plumbing `json:"plumbing,omitempty"`
	Error    string             `json:"error,omitempty"`
	// To a Hello with BzImage: KernelRefused says why no kernel came; otherwise Kernel is
	// attached, after the IPv6 link's descriptor when there is one.
	KernelRefused string   `json:"kernelRefused,omitempty"`
	Kernel        *os.File `json:"-"`
}

// Server is the runner's side.
type Server struct {
	l  *net.UnixListener
	ns *os.File
	bz *os.File // the VM's bzImage to hand over, or nil

	mu            sync.Mutex
	plumbed       bool
	kernel        *os.File // the agent's answer to bz, until Kernel takes it
	kernelRefused string

	wg sync.WaitGroup
}

// Listen makes the socket at path (replacing a stale one) and opens the runner's network
// namespace to hand over, with bz, the VM's kernel when it is a bzImage (nil: none).
func Listen(path string, bz *os.File) (*Server, error) {
	ns, err := os.Open("/proc/self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("the runner's network namespace: %w", err)
	}
	return ListenKernel(path, ns, bz)
}

// ListenWith is Listen handing over ns, which the server closes: for a test standing in for a
// runner whose pod namespace is not its own.
func ListenWith(path string, ns *os.File) (*Server, error) {
	return ListenKernel(path, ns, nil)
}

// ListenKernel is ListenWith handing over bz too, the VM's kernel, a bzImage (nil: none), for
// the PVH kernel inside it (Kernel). The caller keeps bz.
func ListenKernel(path string, ns, bz *os.File) (*Server, error) {
	_ = os.Remove(path)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Net: "unix", Name: path})
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("listening for the node agent on %s: %w", path, err)
	}
	return &Server{l: l, ns: ns, bz: bz}, nil
}

// Kernel is the agent's answer to a bzImage handed over: the PVH kernel inside it (the
// receiver's to close), or why there is none.
type Kernel struct {
	File    *os.File
	Refused string
}

// Kernel is the agent's answer to the bzImage handed over, once Wait returned the plumbing.
func (s *Server) Kernel() Kernel {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.kernel
	s.kernel = nil
	return Kernel{File: k, Refused: s.kernelRefused}
}

// Wait serves agents until one plumbs the namespace and returns its plumbing, or the error it
// reported (a pod the guest cannot take over, say: final, the runner fails with it). A
// connection that breaks first (an agent that died) is forgotten; the next agent starts over.
// Afterwards the server goes on answering Plumbed until Close.
func (s *Server) Wait(ctx context.Context) (*guestnet.Plumbing, error) {
	type answer struct {
		pl  *guestnet.Plumbing
		err error
	}
	done := make(chan answer, 1)
	go func() {
		for {
			c, err := s.l.AcceptUnix()
			if err != nil {
				done <- answer{err: fmt.Errorf("waiting for the node agent: %w", err)}
				return
			}
			pl, err := s.handoff(c)
			var refused *agentError
			switch {
			case err == nil:
				done <- answer{pl: pl}
				s.wg.Add(1)
				go s.serveRest()
				return
			case errors.As(err, &refused):
				done <- answer{err: err}
				return
			}
			// A broken connection: the next agent tries again.
		}
	}()
	select {
	case a := <-done:
		return a.pl, a.err
	case <-ctx.Done():
		s.l.Close()
		return nil, ctx.Err()
	}
}

type agentError struct{ msg string }

func (e *agentError) Error() string {
	return "the node agent could not plumb the pod network: " + e.msg
}

// handoff sends the Hello and the namespace and reads the agent's Result, with the IPv6 link
// (Plumbing.Link6) the agent sends beside it for a dual-stack pod.
func (s *Server) handoff(c *net.UnixConn) (_ *guestnet.Plumbing, err error) {
	defer c.Close()
	if err := s.hello(c, false); err != nil {
		return nil, err
	}
	// The descriptors come with the Result's first bytes; the rest of the line may follow.
	buf, oob := make([]byte, 64<<10), make([]byte, unix.CmsgSpace(2*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, fmt.Errorf("reading the agent's answer: %w", err)
	}
	fds := unixRights(oob[:oobn])
	defer func() {
		if err != nil {
			closeAll(fds)
		}
	}()
	var r Result
	if err := json.NewDecoder(io.MultiReader(bytes.NewReader(buf[:n]), bufio.NewReader(c))).Decode(&r); err != nil {
		return nil, fmt.Errorf("reading the agent's answer: %w", err)
	}
	if r.Error != "" {
		return nil, &agentError{r.Error}
	}
	if r.Plumbing == nil {
		return nil, &agentError{"it answered with no plumbing"}
	}
	wantLink6 := r.Plumbing.Guest.Addr6 != nil
	wantKernel := s.bz != nil && r.KernelRefused == ""
	if len(fds) != btoi(wantLink6)+btoi(wantKernel) {
		return nil, &agentError{fmt.Sprintf("it sent %d descriptors: want the IPv6 link exactly when the guest has an IPv6 address (%v) and the kernel exactly when one was asked for and not refused (%v)", len(fds), r.Plumbing.Guest.Addr6, wantKernel)}
	}
	if wantLink6 {
		r.Plumbing.Link6 = os.NewFile(uintptr(fds[0]), "ipv6-link")
	}
	s.mu.Lock()
	s.plumbed = true
	if wantKernel {
		s.kernel = os.NewFile(uintptr(fds[len(fds)-1]), "kernel")
	} else if s.bz != nil {
		s.kernelRefused = r.KernelRefused
	}
	s.mu.Unlock()
	return r.Plumbing, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (s *Server) hello(c *net.UnixConn, plumbed bool) error {
	h, fds := Hello{Plumbed: plumbed}, []int{int(s.ns.Fd())}
	if !plumbed && s.bz != nil {
		h.BzImage, fds = true, append(fds, int(s.bz.Fd()))
	}
	b, _ := json.Marshal(h)
	_, _, err := c.WriteMsgUnix(append(b, '\n'), unix.UnixRights(fds...), nil)
	return err
}

// serveRest tells every later agent that the namespace is plumbed.
func (s *Server) serveRest() {
	defer s.wg.Done()
	for {
		c, err := s.l.AcceptUnix()
		if err != nil {
			return
		}
		_ = s.hello(c, true)
		c.Close()
	}
}

// Close stops listening and removes the socket; it closes a kernel Kernel never took.
func (s *Server) Close() error {
	err := s.l.Close()
	s.wg.Wait()
	s.ns.Close()
	if k := s.Kernel(); k.File != nil {
		k.File.Close()
	}
	return err
}

// Receive is the agent's side of a connection: the runner's Hello, its namespace and, with
// Hello.BzImage, its VM's bzImage, as open descriptors the caller closes.
func Receive(c *net.UnixConn) (_ Hello, ns, bz *os.File, err error) {
	buf, oob := make([]byte, 512), make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return Hello{}, nil, nil, fmt.Errorf("reading the runner's hello: %w", err)
	}
	fds := unixRights(oob[:oobn])
	var h Hello
	if err := json.Unmarshal(buf[:n], &h); err != nil {
		closeAll(fds)
		return Hello{}, nil, nil, fmt.Errorf("the runner's hello %q: %w", buf[:n], err)
	}
	if want := 1 + btoi(h.BzImage && !h.Plumbed); len(fds) != want {
		closeAll(fds)
		return Hello{}, nil, nil, fmt.Errorf("the runner sent %d descriptors with its hello, want %d: its network namespace, then its bzImage if it said it sends one", len(fds), want)
	}
	// setns checks the type too; this says so before anything is tried there.
	if t, err := unix.IoctlRetInt(fds[0], unix.NS_GET_NSTYPE); err != nil || t != unix.CLONE_NEWNET {
		closeAll(fds)
		return Hello{}, nil, nil, fmt.Errorf("the descriptor the runner sent is not a network namespace")
	}
	ns = os.NewFile(uintptr(fds[0]), "netns")
	if len(fds) == 2 {
		bz = os.NewFile(uintptr(fds[1]), "bzImage")
	}
	return h, ns, bz, nil
}

// Reply sends the agent's Result, with the plumbing's IPv6 link when it has one, then the
// kernel when it has one.
func Reply(c *net.UnixConn, r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var fds []int
	if r.Plumbing != nil && r.Plumbing.Link6 != nil {
		fds = append(fds, int(r.Plumbing.Link6.Fd()))
	}
	if r.Kernel != nil {
		fds = append(fds, int(r.Kernel.Fd()))
	}
	var rights []byte
	if len(fds) > 0 {
		rights = unix.UnixRights(fds...)
	}
	_, _, err = c.WriteMsgUnix(append(b, '\n'), rights, nil)
	return err
}

func unixRights(oob []byte) []int {
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob); err == nil {
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
