package migration

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/virtpod/virtpod/agent/migration/streampipe"
	"github.com/virtpod/virtpod/agent/podcontrol"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
)

// waitListening is how often a target pod's control directory is looked at until its QEMU
// listens: a file appearing makes no pod event. Only target pods still starting are looked at.
const waitListening = time.Second

// convergeTarget writes where to send the stream on a target pod once its QEMU listens.
func (e *Executor) convergeTarget(ctx context.Context, pod *corev1.Pod) (time.Duration, error) {
	if pod.Annotations[vmv1.AnnotationMigration] == "" || pod.Annotations[vmv1.AnnotationMigrationReceiver] == e.receiver {
		return 0, nil
	}
	if pod.Status.Phase != corev1.PodRunning {
		return 0, nil // its status changing to Running is an event
	}
	ctl, err := podcontrol.Lookup(ctx, e.PodResources, e.ControlDir, pod.Namespace, pod.Name)
	if err != nil {
		return 0, err
	}
	if !ctl.IsSocket(controlapi.MigrateInSocket) {
		return waitListening, nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{vmv1.AnnotationMigrationReceiver: e.receiver}}})
	if _, err := e.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return 0, fmt.Errorf("writing the receiver on target pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	e.Log.Info("target listens", zap.String("pod", pod.Namespace+"/"+pod.Name), zap.String("receiver", e.receiver))
	return 0, nil
}

// Anyone on the pod network reaches port 9440. Until its TLS handshake proves a peer holds
// the agents' certificate, a connection costs a goroutine and a handshake's memory in an agent
// limited to 128Mi: at most maxHandshakes are in their handshake at once, each for at most
// acceptTimeout, and the excess is closed at once. Agents retry a refused connection
// (dialReceiver's caller), so a flood delays a migration by acceptTimeout at most per try.
const (
	maxHandshakes = 32
	acceptTimeout = 5 * time.Second
)

// serve takes streams until l is closed.
func (e *Executor) serve(ctx context.Context, l net.Listener) {
	cfg := e.cred.ServerConfig()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				e.Log.Error("migration receiver stopped", zap.Error(err))
			}
			return
		}
		select {
		case e.slots <- struct{}{}:
		default:
			c.Close() // no goroutine, no log line: both would be the flood's
			continue
		}
		go e.receive(ctx, tls.Server(c, cfg))
	}
}

// handshake authenticates conn in one of the receiver's slots and frees it.
func (e *Executor) handshake(ctx context.Context, conn *tls.Conn) error {
	e.handshakes.Add(1)
	defer func() { e.handshakes.Add(-1); <-e.slots }()
	_ = conn.SetDeadline(time.Now().Add(acceptTimeout))
	return conn.HandshakeContext(ctx)
}

// receive checks one stream's TLS and header and relays it into the target pod's QEMU.
func (e *Executor) receive(ctx context.Context, conn *tls.Conn) {
	log := e.Log.With(zap.String("from", conn.RemoteAddr().String()))
	if err := e.handshake(ctx, conn); err != nil {
		log.Debug("migration stream refused: TLS", zap.Error(err))
		conn.Close()
		return
	}
	// An agent: its header and the answer get the usual time.
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	r := bufio.NewReaderSize(conn, maxLine)
	h, pod, in, err := e.accept(ctx, r)
	if err != nil {
		log.Warn("migration stream refused", zap.Error(err))
		_, _ = io.WriteString(conn, answerError+oneLine(err.Error())+"\n")
		conn.Close()
		return
	}
	if _, err := io.WriteString(conn, answerOK+"\n"); err != nil {
		in.Close()
		conn.Close()
		return
	}
	_ = conn.SetDeadline(time.Time{})
	log = log.With(zap.String("pod", pod.Namespace+"/"+pod.Name), zap.String("migration", h.Migration))
	what := "migration stream"
	if h.Channel == ChannelNBD {
		what = "disk mirror connection"
	}
	log.Info("receiving " + what)
	start := time.Now()
	n, err := streampipe.Pipe(conn, r, in, in)
	log.Info(what+" ended", zap.Int64("bytes", n), zap.Duration("took", time.Since(start)), zap.Error(err))
}

// accept reads the header and, when it names a target pod of this node waiting for that
// migration, connects to the pod's QEMU.
func (e *Executor) accept(ctx context.Context, r *bufio.Reader) (header, *corev1.Pod, net.Conn, error) {
	var h header
	line, err := readLine(r)
	if err != nil {
		return h, nil, nil, fmt.Errorf("reading the header: %w", err)
	}
	if err := json.Unmarshal([]byte(line), &h); err != nil || h.PodUID == "" || h.Migration == "" {
		return h, nil, nil, fmt.Errorf("the header %q is not {\"podUID\":…,\"migration\":…}", truncate(line))
	}
	objs, err := e.byUID.ByIndex(uidIndex, h.PodUID)
	if err != nil || len(objs) != 1 {
		return h, nil, nil, fmt.Errorf("no runner pod with UID %s on node %s", h.PodUID, e.Node)
	}
	pod := objs[0].(*corev1.Pod)
	name := pod.Namespace + "/" + pod.Name
	switch {
	case pod.Spec.NodeName != e.Node:
		return h, nil, nil, fmt.Errorf("pod %s is not on node %s", name, e.Node)
	case pod.Annotations[vmv1.AnnotationMigration] != h.Migration:
		return h, nil, nil, fmt.Errorf("pod %s is not the target of migration %s", name, h.Migration)
	case pod.DeletionTimestamp != nil:
		return h, nil, nil, fmt.Errorf("pod %s is being deleted", name)
	}
	// The migration, not the pod's label, says which pod is its target.
	if o, err := podcontrol.Authorize(ctx, e.Kube, pod); err != nil || !o.Target || string(o.Migration.UID) != h.Migration {
		e.Log.Info("stream for a pod no live migration names as its target", zap.String("pod", name), zap.Error(err))
		return h, nil, nil, fmt.Errorf("pod %s is not a migration target", name)
	}
	sock, release, err := e.claim(pod, h.Channel)
	if err != nil {
		return h, nil, nil, err
	}
	in, err := func() (net.Conn, error) {
		ctl, err := podcontrol.Lookup(ctx, e.PodResources, e.ControlDir, pod.Namespace, pod.Name)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
		defer cancel()
		return ctl.Dial(ctx, sock)
	}()
	if err != nil {
		release()
		return h, nil, nil, fmt.Errorf("the target runner of pod %s does not listen on %s: %w", name, sock, err)
	}
	if h.Channel == ChannelNBD {
		in = &releasing{Conn: in, release: release}
	}
	return h, pod, in, nil
}

// claim takes a target pod's place for a stream on channel and says which of its sockets the
// stream goes to. One migration stream per target, ever: its QEMU takes one incoming migration.
// NBD connections, one per mirrored disk, are bounded while they last.
func (e *Executor) claim(pod *corev1.Pod, channel string) (sock string, release func(), err error) {
	name := pod.Namespace + "/" + pod.Name
	e.mu.Lock()
	defer e.mu.Unlock()
	switch channel {
	case "":
		if e.received[pod.UID] {
			return "", nil, fmt.Errorf("pod %s already took a stream", name)
		}
		e.received[pod.UID] = true
		return controlapi.MigrateInSocket, func() { e.mu.Lock(); delete(e.received, pod.UID); e.mu.Unlock() }, nil
	case ChannelNBD:
		if e.nbdConns[pod.UID] >= maxNBDPerTarget {
			return "", nil, fmt.Errorf("pod %s has %d disk mirror connections already", name, maxNBDPerTarget)
		}
		e.nbdConns[pod.UID]++
		var once sync.Once
		return controlapi.NBDInSocket, func() {
			once.Do(func() {
				e.mu.Lock()
				if e.nbdConns[pod.UID]--; e.nbdConns[pod.UID] <= 0 {
					delete(e.nbdConns, pod.UID)
				}
				e.mu.Unlock()
			})
		}, nil
	}
	return "", nil, fmt.Errorf("unknown channel %q", channel)
}

// releasing gives its place back when closed.
type releasing struct {
	net.Conn
	release func()
}

func (r *releasing) Close() error {
	r.release()
	return r.Conn.Close()
}

// CloseWrite passes a half-close on, as pipe does for the unix socket underneath.
func (r *releasing) CloseWrite() error {
	if cw, ok := r.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
