package migration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/virtpod/virtpod/agent/migration/streampipe"
	"github.com/virtpod/virtpod/agent/podcontrol"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
)

// session is one migration this agent sends from a source pod of its node.
type session struct {
	migrateTo string
	done      chan struct{}
}

// convergeSource starts a send for a new migrate-to, and resumes a guest the controller asks
// back. A running send follows the pod itself (cancel).
func (e *Executor) convergeSource(ctx context.Context, pod *corev1.Pod, o podcontrol.Owner) error {
	if pod.Status.Phase != corev1.PodRunning {
		return nil
	}
	to := pod.Annotations[vmv1.AnnotationMigrateTo]
	e.mu.Lock()
	_, running := e.sessions[pod.UID]
	fresh := to != "" && !running && e.finished[pod.UID] != to
	_, seen := e.finished[pod.UID]
	resume := pod.Annotations[vmv1.AnnotationMigrationResume] == "true" && !running && !e.resumed[pod.UID]
	if fresh {
		s := &session{migrateTo: to, done: make(chan struct{})}
		e.sessions[pod.UID] = s
		go e.send(ctx, pod, o, s, seen)
	}
	if resume {
		e.resumed[pod.UID] = true
	}
	e.mu.Unlock()
	if resume && !fresh {
		if err := e.resume(ctx, pod); err != nil {
			e.mu.Lock()
			delete(e.resumed, pod.UID)
			e.mu.Unlock()
			return err
		}
	}
	return nil
}

// resume has the runner of a source pod whose completed send went to a dead target run its
// guest again. Only a completed send is resumed: after an agent restart the annotation is
// still there, and the runner, already resumed, no longer says completed.
func (e *Executor) resume(ctx context.Context, pod *corev1.Pod) error {
	rc, err := e.runner(ctx, pod)
	if err != nil {
		return err
	}
	defer rc.Close()
	st, err := rc.Migration(ctx)
	if err != nil {
		return err
	}
	if st.State != controlapi.MigrationCompleted {
		return nil
	}
	e.Log.Info("resuming the guest on the source", zap.String("pod", pod.Namespace+"/"+pod.Name))
	if st, err = rc.StopMigration(ctx); err != nil {
		return err
	}
	return e.writeState(ctx, pod, st)
}

func (e *Executor) runner(ctx context.Context, pod *corev1.Pod) (*podcontrol.Client, error) {
	ctl, err := podcontrol.Lookup(ctx, e.PodResources, e.ControlDir, pod.Namespace, pod.Name)
	if err != nil {
		return nil, err
	}
	return podcontrol.NewClient(ctl, 30*time.Second), nil
}

// send carries out one migrate-to: relay QEMU's stream to the target node's agent and report
// the runner's progress until it ends. seen: this agent has sent from this pod before, so a
// finished state the runner still reports is an earlier migration's.
func (e *Executor) send(ctx context.Context, pod *corev1.Pod, o podcontrol.Owner, s *session, seen bool) {
	key := pod.Namespace + "/" + pod.Name
	log := e.Log.With(zap.String("pod", key), zap.String("migrateTo", s.migrateTo))
	defer func() {
		e.mu.Lock()
		delete(e.sessions, pod.UID)
		e.finished[pod.UID] = s.migrateTo
		e.mu.Unlock()
		close(s.done)
		e.watch.Add(key) // a new migrate-to or a resume may be waiting
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, streamErr, err := e.start(ctx, pod, o, s.migrateTo, seen, log)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("migration not started", zap.Error(err))
			e.finalState(ctx, pod, controlapi.MigrationStatus{Role: controlapi.RoleSource, State: controlapi.MigrationFailed, Error: err.Error()}, log)
		}
		return
	}
	if st.Terminal() {
		e.finalState(ctx, pod, st, log)
		return
	}
	e.follow(ctx, pod, s.migrateTo, st, streamErr, log)
}

// stream is the relay of one send: QEMU's connection to the target node's agent, and its
// disks' NBD connections.
type stream struct {
	mu    sync.Mutex
	err   error
	l     net.Listener
	out   net.Conn
	nbd   net.Listener
	conns []net.Conn // the NBD relays' ends
}

// close ends the relay: its listeners and every connection.
func (s *stream) close() {
	s.l.Close()
	s.out.Close()
	s.nbd.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}

// relayNBD relays each of QEMU's NBD connections (one per mirrored disk) to the target node's
// agent, until the listener is closed. A connection the target's agent refuses is closed, which
// fails the runner's mirror and so the migration, with QEMU's words.
func (e *Executor) relayNBD(ctx context.Context, sm *stream, addr string, h header, log *zap.Logger) {
	h.Channel = ChannelNBD
	for {
		in, err := sm.nbd.Accept()
		if err != nil {
			return
		}
		out, outR, err := dialReceiver(ctx, e.cred.ClientConfig(), addr, h)
		if err != nil {
			sm.fail(fmt.Errorf("a disk's mirror: %w", err))
			in.Close()
			continue
		}
		sm.mu.Lock()
		sm.conns = append(sm.conns, in, out)
		sm.mu.Unlock()
		go func() {
			n, err := streampipe.Pipe(in, in, out, outR)
			log.Info("a disk's mirror connection ended", zap.Int64("bytes", n), zap.Error(err))
		}()
	}
}

func (s *stream) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

func (s *stream) failure() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// start asks the runner to send, unless it already does (an agent restarted mid-migration:
// the runner is asked once) or already did. It returns the runner's status and the relay, nil
// when the send was adopted.
func (e *Executor) start(ctx context.Context, pod *corev1.Pod, o podcontrol.Owner, to string, seen bool, log *zap.Logger) (controlapi.MigrationStatus, *stream, error) {
	var addr, target string
	if err := retry(ctx, func() (err error) { addr, target, err = e.route(ctx, pod, o, to); return err }); err != nil {
		return controlapi.MigrationStatus{}, nil, err
	}
	rc, st, err := e.runnerState(ctx, pod)
	if err != nil {
		return st, nil, err
	}
	defer rc.Close()
	if adopted(pod, st, seen, log) {
		return st, nil, nil
	}
	sm, err := e.openStream(ctx, rc.Control(), addr, header{PodUID: target, Migration: string(o.Migration.UID)}, log)
	if err != nil {
		return st, nil, err
	}
	return startSend(ctx, rc, pod, sm, addr, log)
}

// runnerState reads the runner's migration, retrying while the runner does not answer.
func (e *Executor) runnerState(ctx context.Context, pod *corev1.Pod) (*podcontrol.Client, controlapi.MigrationStatus, error) {
	var rc *podcontrol.Client
	var st controlapi.MigrationStatus
	err := retry(ctx, func() (err error) {
		if rc, err = e.runner(ctx, pod); err != nil {
			return err
		}
		st, err = rc.Migration(ctx)
		return err
	})
	return rc, st, err
}

// adopted says whether the runner's send, in st, is this migration's already: one under way,
// or one that ended under this agent's predecessor.
func adopted(pod *corev1.Pod, st controlapi.MigrationStatus, seen bool, log *zap.Logger) bool {
	switch {
	case st.State == controlapi.MigrationActive:
		log.Info("the runner already sends: following it (the agent restarted?)")
		return true
	case st.Terminal() && !seen && pod.Annotations[vmv1.AnnotationMigrationState] != "":
		// This agent never sent from the pod, and its predecessor reported on it: the
		// runner's finished state is this migration's. (The controller clears the state
		// when it asks for a new migration.)
		log.Info("the runner's migration already ended: reporting it", zap.String("state", st.State))
		return true
	}
	return false
}

// openStream dials the target node's agent for h, listens for QEMU's stream and its disks' NBD
// connections in the pod's control directory, and relays them there until ctx ends.
func (e *Executor) openStream(ctx context.Context, ctl podcontrol.Control, addr string, h header, log *zap.Logger) (*stream, error) {
	// The target's agent first: a refusal is clearer from there than from QEMU.
	var out net.Conn
	var outR *bufio.Reader
	if err := retry(ctx, func() (err error) {
		out, outR, err = dialReceiver(ctx, e.cred.ClientConfig(), addr, h)
		if errors.As(err, new(*refusedError)) {
			return permanent{err}
		}
		return err
	}); err != nil {
		return nil, err
	}
	l, err := ctl.Listen(controlapi.MigrateOutSocket)
	if err != nil {
		out.Close()
		return nil, err
	}
	nbd, err := ctl.Listen(controlapi.NBDOutSocket)
	if err != nil {
		l.Close()
		out.Close()
		return nil, err
	}
	sm := &stream{l: l, out: out, nbd: nbd}
	go e.relayNBD(ctx, sm, addr, h, log)
	go sm.relay(ctx, outR, addr, log)
	go func() { <-ctx.Done(); sm.close() }()
	return sm, nil
}

// relay relays QEMU's migration stream, once QEMU connects, to the target node's agent at
// addr, whose answers come on outR.
func (s *stream) relay(ctx context.Context, outR *bufio.Reader, addr string, log *zap.Logger) {
	in, err := s.l.Accept()
	s.l.Close() // removes the socket: QEMU connects once
	if err != nil {
		s.out.Close()
		if ctx.Err() == nil {
			s.fail(fmt.Errorf("QEMU never connected to %s: %w", controlapi.MigrateOutSocket, err))
		}
		return
	}
	log.Info("relaying the migration stream", zap.String("to", addr))
	start := time.Now()
	n, err := streampipe.Pipe(in, in, s.out, outR)
	if err != nil && ctx.Err() == nil {
		s.fail(fmt.Errorf("the stream to %s broke after %d bytes: %w", addr, n, err))
	}
	log.Info("migration stream ended", zap.Int64("bytes", n), zap.Duration("took", time.Since(start)), zap.Error(err))
}

// startSend has the runner send into sm. A runner that already sends (it refuses a second
// send) is followed.
func startSend(ctx context.Context, rc *podcontrol.Client, pod *corev1.Pod, sm *stream, addr string, log *zap.Logger) (controlapi.MigrationStatus, *stream, error) {
	st, err := rc.StartMigration(ctx, request(pod))
	var r *podcontrol.RunnerRefusal
	if errors.As(err, &r) && r.Code == http.StatusConflict && st.State == controlapi.MigrationActive {
		log.Info("the runner already sends: following it")
		sm.l.Close()
		return st, sm, nil
	}
	if err != nil {
		sm.close()
		return st, nil, err
	}
	log.Info("migration started", zap.String("to", addr))
	return st, sm, nil
}

// follow reads the runner's progress every Poll until the migration ends, writes it on the
// pod on every change of state and at most every Report while active, and cancels the send
// when the controller takes migrate-to back.
func (e *Executor) follow(ctx context.Context, pod *corev1.Pod, to string, st controlapi.MigrationStatus, sm *stream, log *zap.Logger) {
	rc, err := e.runner(ctx, pod)
	if err != nil {
		st.State, st.Error = controlapi.MigrationFailed, err.Error()
		e.finalState(ctx, pod, st, log)
		return
	}
	defer rc.Close()
	if sm != nil {
		defer sm.close()
	}
	written, lastWrite := "", time.Time{}
	var cancelled time.Time
	var unanswered int
	tick := time.NewTicker(e.Poll)
	defer tick.Stop()
	for {
		cur, err := e.pods.Pods(pod.Namespace).Get(pod.Name)
		if apierrors.IsNotFound(err) || err == nil && cur.UID != pod.UID {
			log.Info("the source pod is gone; the migration with it")
			return
		}
		if err == nil {
			pod = cur
		}
		if pod.Annotations[vmv1.AnnotationMigrateTo] != to && st.State != controlapi.MigrationNone && time.Since(cancelled) > 5*time.Second {
			log.Info("migrate-to taken back: cancelling")
			cancelled = time.Now()
			if _, err := rc.StopMigration(ctx); err != nil {
				log.Warn("cancelling", zap.Error(err))
			}
		}
		if st.State == controlapi.MigrationNone && !cancelled.IsZero() {
			st.State = controlapi.MigrationCancelled
		}
		if st.Terminal() {
			if st.State == controlapi.MigrationFailed {
				if err := sm.failure(); err != nil {
					st.Error = strings.TrimPrefix(st.Error+"; node agent: "+err.Error(), "; ")
				}
			}
			e.finalState(ctx, pod, st, log)
			return
		}
		b, _ := json.Marshal(st)
		if string(b) != written && (statePart(string(b)) != statePart(written) || time.Since(lastWrite) >= e.Report) {
			if err := e.writeState(ctx, pod, st); err != nil {
				log.Warn("writing the migration's state", zap.Error(err))
			} else {
				written, lastWrite = string(b), time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		next, err := rc.Migration(ctx)
		switch {
		case err != nil:
			// The runner not answering for long is the source failing; the controller sees its
			// pod, and the state says why.
			if unanswered++; unanswered*int(e.Poll/time.Millisecond) >= 30_000 {
				st.State, st.Error = controlapi.MigrationFailed, err.Error()
			}
		case next.State == controlapi.MigrationNone && cancelled.IsZero():
			unanswered = 0
			st = next
			st.State, st.Error = controlapi.MigrationFailed, "the source runner has no migration any more (it restarted?)"
		default:
			unanswered = 0
			st = next
		}
	}
}

// statePart is the state of a written status, to tell a change of state from progress.
func statePart(js string) string {
	var st controlapi.MigrationStatus
	_ = json.Unmarshal([]byte(js), &st)
	return st.State
}

// finalState writes a migration's end, retrying for a while: the controller waits for it.
func (e *Executor) finalState(ctx context.Context, pod *corev1.Pod, st controlapi.MigrationStatus, log *zap.Logger) {
	st.Role = controlapi.RoleSource
	log.Info("migration ended", zap.String("state", st.State), zap.String("error", st.Error), zap.Int64("bytes", st.TransferredBytes))
	if err := retry(ctx, func() error {
		err := e.writeState(ctx, pod, st)
		if apierrors.IsNotFound(err) {
			return permanent{err}
		}
		return err
	}); err != nil {
		log.Warn("writing the migration's end", zap.Error(err))
	}
}

// writeState writes the runner's status as the pod's migration-state.
func (e *Executor) writeState(ctx context.Context, pod *corev1.Pod, st controlapi.MigrationStatus) error {
	b, _ := json.Marshal(st)
	if pod.Annotations[vmv1.AnnotationMigrationState] == string(b) {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{vmv1.AnnotationMigrationState: string(b)}}})
	_, err := e.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// parseMigrateTo splits <ip>:<port>/<target pod UID>.
func parseMigrateTo(to string) (addr, target string, err error) {
	addr, target, ok := strings.Cut(to, "/")
	if _, _, herr := net.SplitHostPort(addr); !ok || herr != nil || target == "" || strings.Contains(target, "/") {
		return "", "", fmt.Errorf("%s %q is not <ip>:<port>/<target pod UID>", vmv1.AnnotationMigrateTo, to)
	}
	return addr, target, nil
}

// permanent is an error retry gives up on at once.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// retry calls f until it succeeds, fails permanently or 10 s pass: a runner, kubelet or
// target agent briefly unreachable is not yet a failed migration.
func retry(ctx context.Context, f func() error) error {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Steps: 6, Cap: 4 * time.Second},
		func(context.Context) (bool, error) {
			last = f()
			var p permanent
			if errors.As(last, &p) {
				return false, p.error
			}
			return last == nil, nil
		})
	if err != nil && last != nil && !errors.As(last, new(permanent)) {
		return last
	}
	return err
}

// request is the PUT for the source pod's migration: auto-converge, and the migration's
// spec.bandwidthMiBps when the controller wrote it (else the runner's default).
func request(pod *corev1.Pod) controlapi.MigrationRequest {
	req := controlapi.MigrationRequest{AutoConverge: true}
	if bw, err := strconv.ParseInt(pod.Annotations[vmv1.AnnotationMigrationBandwidth], 10, 64); err == nil && bw > 0 {
		req.BandwidthMiBps = bw
	}
	return req
}
