// Package migration is the node agent's part of a live migration (docs/api.md, Live
// migration): it carries QEMU's migration stream from the source runner's unix socket on one
// node to the target runner's on another, between the two nodes' agents over mutual TLS, so
// neither QMP nor the stream is ever on an open port of a VM's pod. On the target's node it says
// where to send the stream (the pod's migration-receiver annotation) once the target QEMU
// listens, and takes the stream in; on the source's node it asks the runner to send, relays the
// stream and writes the runner's progress into the pod's migration-state annotation. The
// migration controller decides everything; the agent keeps no state that a restart could lose
// except which streams it relays, and those break with it anyway.
package migration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/virtpod/virtpod/agent/podcontrol"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// DefaultPort is where agents take migration streams.
const DefaultPort = 9440

// Executor carries out the migrations of the runner pods on one node, both ways.
type Executor struct {
	// The agent acts only for pods a VM or migration names (podcontrol.Authorize).
	podcontrol.Agent
	// Namespace is the agents' own, where their Secret is.
	Namespace string
	// PodIP is the agent pod's address (the downward API's status.podIP): other nodes' agents
	// send streams there. Listen is the receiver's address (default ":9440").
	PodIP  string
	Listen string

	// Poll is how often an active migration's progress is read (default 500 ms); Report the
	// longest gap between two writes of it to the pod while active (default 2 s).
	Poll   time.Duration
	Report time.Duration

	cred     *Credentials
	receiver string // PodIP:port, as written on target pods
	pods     listerscorev1.PodLister
	byUID    cache.Indexer
	watch    *podcontrol.NodePods
	mu       sync.Mutex
	sessions map[types.UID]*session // source pods whose migration this agent carries out
	finished map[types.UID]string   // source pod → the migrate-to of its last session here
	resumed  map[types.UID]bool     // source pods whose resume was handled
	received map[types.UID]bool     // target pods that took a stream
	nbdConns map[types.UID]int      // target pods' disk mirror connections now

	slots      chan struct{} // one per connection not yet past its TLS handshake
	handshakes atomic.Int32  // connections in their handshake now, for tests
}

const uidIndex = "uid"

// Run takes streams and follows the node's runner pods until ctx ends.
func (e *Executor) Run(ctx context.Context) error {
	if e.Kube == nil {
		return errors.New("migration executor: no client to read VirtualMachines")
	}
	if e.Node == "" || e.PodIP == "" || e.Namespace == "" {
		return errors.New("migration executor: node name, pod IP and namespace are needed (env NODE_NAME, POD_IP, POD_NAMESPACE from the downward API)")
	}
	if e.Listen == "" {
		e.Listen = ":" + strconv.Itoa(DefaultPort)
	}
	if e.Log == nil {
		e.Log = zap.NewNop()
	}
	if e.Poll <= 0 {
		e.Poll = 500 * time.Millisecond
	}
	if e.Report <= 0 {
		e.Report = 2 * time.Second
	}
	e.slots = make(chan struct{}, maxHandshakes)
	e.sessions, e.finished, e.resumed, e.received = map[types.UID]*session{}, map[types.UID]string{}, map[types.UID]bool{}, map[types.UID]bool{}
	e.nbdConns = map[types.UID]int{}
	cred, err := EnsureSecret(ctx, e.Client, e.Namespace)
	if err != nil {
		return err
	}
	e.cred = cred
	l, err := net.Listen("tcp", e.Listen)
	if err != nil {
		return fmt.Errorf("migration receiver on %s: %w", e.Listen, err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	e.receiver = net.JoinHostPort(e.PodIP, port)

	w, err := podcontrol.WatchNode(ctx, e.Client, e.Node, podcontrol.WatchOptions{
		Indexers: cache.Indexers{uidIndex: func(o any) ([]string, error) {
			return []string{string(o.(*corev1.Pod).UID)}, nil
		}},
		MaxDelay: time.Minute, Retrying: "migration step not done; retrying", Log: e.Log,
	})
	if err != nil {
		l.Close()
		return err
	}
	defer w.Shutdown() // after the sessions below, which read the cache
	e.watch, e.pods, e.byUID = w, w.Lister(), w.Indexer()

	var wg sync.WaitGroup
	wg.Go(func() { e.serve(ctx, l) })
	go func() { <-ctx.Done(); l.Close() }()
	e.Log.Info("migration executor started", zap.String("receiver", e.receiver))
	w.Run(ctx, workers, e.converge)
	wg.Wait()
	e.mu.Lock()
	running := make([]*session, 0, len(e.sessions))
	for _, s := range e.sessions {
		running = append(running, s)
	}
	e.mu.Unlock()
	for _, s := range running {
		<-s.done // their contexts ended with ctx
	}
	return nil
}

// workers is how many pods of a node are looked at at once; streams run beside them.
const workers = 2

// converge does what the pod's labels and annotations ask of this node's agent now; after > 0
// asks to look again then (a target QEMU not yet listening).
func (e *Executor) converge(ctx context.Context, pod *corev1.Pod) (time.Duration, error) {
	if pod.DeletionTimestamp != nil || pod.Spec.NodeName != e.Node {
		return 0, nil
	}
	if !e.mayAct(pod) {
		return 0, nil
	}
	// Target or source is the controller's objects' word, never the pod's labels: a VM's
	// labels reach its pod, migration-role among them.
	o, err := podcontrol.Authorize(ctx, e.Kube, pod)
	if err != nil {
		return 0, err // logged and retried; nothing is written on a pod refused
	}
	if o.Target {
		return e.convergeTarget(ctx, pod)
	}
	return 0, e.convergeSource(ctx, pod, o)
}

// mayAct: the pod asks something of this agent as a target (a migration, no receiver of this
// agent's yet) or as a source (migrate-to, resume). Only such pods are looked up. Every pod of
// the node passes here, so it is also where a resume taken back is forgotten.
func (e *Executor) mayAct(pod *corev1.Pod) bool {
	a := pod.Annotations
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	e.mu.Lock()
	if a[vmv1.AnnotationMigrationResume] != "true" {
		// The controller took the resume back (the next migration's mark does): one it asks
		// later is about another send, and must be acted on.
		delete(e.resumed, pod.UID)
	}
	resumed := e.resumed[pod.UID]
	e.mu.Unlock()
	return a[vmv1.AnnotationMigration] != "" && a[vmv1.AnnotationMigrationReceiver] != e.receiver ||
		a[vmv1.AnnotationMigrateTo] != "" || a[vmv1.AnnotationMigrationResume] == "true" && !resumed
}
