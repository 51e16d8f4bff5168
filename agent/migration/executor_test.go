package migration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/virtpod/virtpod/agent/podcontrol/podcontroltest"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// reportEvery is the agents' Report in these tests; they poll every 50 ms.
const reportEvery = 400 * time.Millisecond

func nonEmpty(v string) error {
	if v == "" {
		return fmt.Errorf("not yet")
	}
	return nil
}

// states records every migration-state the pod is given, with when.
type states struct {
	mu   sync.Mutex
	seen []controlapi.MigrationStatus
	at   []time.Time
}

func watchStates(t *testing.T, pod *corev1.Pod) *states {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().Pods(pod.Namespace).Watch(context.Background(), metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	s := &states{}
	go func() {
		last := ""
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			v := p.Annotations[vmv1.AnnotationMigrationState]
			if v == "" || v == last {
				continue
			}
			last = v
			var st controlapi.MigrationStatus
			_ = json.Unmarshal([]byte(v), &st)
			s.mu.Lock()
			s.seen, s.at = append(s.seen, st), append(s.at, time.Now())
			s.mu.Unlock()
		}
	}()
	return s
}

// sourceLabels are the source pods' in migrationPair: a VM's labels reach its pod, so a source
// may carry migration-role target; the migration, not the label, makes it the source.
var sourceLabels = map[string]string{vmv1.LabelMigrationRole: vmv1.MigrationRoleTarget}

// migrationPair makes a target pod on node b whose QEMU listens, waits for b's agent to write
// its receiver, and makes the source pod on node a with its runner.
func migrationPair(t *testing.T, a, b *node, size int, delay time.Duration) (source, target *corev1.Pod, runner *sourceRunner, q *targetQEMU, receiver string) {
	t.Helper()
	ns := namespace(t)
	vm := podcontroltest.VM(t, env.Client, ns, "web")
	mig := newMigration(t, vm, "web-runner", "web-m1")
	target = targetPod(t, vm, mig, b.Name)
	q = listenTarget(t, b.Dir(target, "control3"))
	receiver = annotation(t, target, vmv1.AnnotationMigrationReceiver, 20*time.Second, nonEmpty)
	if !strings.HasPrefix(receiver, "127.0.0.1:") {
		t.Fatalf("receiver %q, want the agent pod's IP and port", receiver)
	}
	agentPod(t, b, receiver)
	source = podOf(t, vm, ns, "web-runner", a.Name, sourceLabels, map[string]string{vmv1.AnnotationMigration: string(mig.UID)})
	podcontroltest.Name(t, env.Client, vm, source)
	runner = newSourceRunner(controlapi.MigrationStatus{}, size, delay)
	runner.serve(t, a.Dir(source, "control3"))
	return source, target, runner, q, receiver
}

// TestMigrationStream: two nodes' agents carry a source QEMU's stream into the target QEMU
// over mutual TLS, byte for byte; the target's agent says where to send once its QEMU
// listens; the source's agent listens before it asks the runner, asks once, and reports the
// runner's progress while active (not more often than Report) and its end.
func TestMigrationStream(t *testing.T) {
	a, b := newNode(t, "mig-a"), newNode(t, "mig-b")
	b.start(t)
	const size = 16 << 20
	source, target, runner, q, receiver := migrationPair(t, a, b, size, 25*time.Millisecond)
	seen := watchStates(t, source)
	a.start(t)
	annotate(t, source, map[string]any{vmv1.AnnotationMigrateTo: receiver + "/" + string(target.UID), vmv1.AnnotationMigrationBandwidth: "64"})

	st := stateIs(t, source, controlapi.MigrationCompleted, 60*time.Second)
	if st.Role != controlapi.RoleSource || st.TransferredBytes != size || st.DowntimeMs != 42 {
		t.Errorf("final state %+v, want the runner's: source, %d bytes, 42 ms downtime", st, size)
	}
	select {
	case <-q.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the target QEMU's stream did not end")
	}
	runner.mu.Lock()
	sent, sockErr := runner.sum, runner.sockErr
	runner.mu.Unlock()
	asked := runner.asked(t)
	if asked.BandwidthMiBps != 64 || !asked.AutoConverge {
		t.Errorf("the agent asked the runner for %+v, want the migration's 64 MiB/s and auto-converge", asked)
	}
	if q.n != size || q.sum != sent {
		t.Errorf("the target QEMU got %d bytes (sha256 %x), the source sent %d (%x)", q.n, q.sum, size, sent)
	}
	if sockErr != "" {
		t.Errorf("the agent did not listen on migrate-out.sock (a socket, mode 0600) before the PUT: %s", sockErr)
	}
	if puts, dels := runner.counts(); puts != 1 || dels != 0 {
		t.Errorf("runner got %d PUTs and %d DELETEs, want 1 and 0", puts, dels)
	}

	// The watch sees the completed state a moment after the read above did.
	kubeapi.Eventually(t, "the watch to see the completed state", 10*time.Second, func() error {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		if n := len(seen.seen); n == 0 || seen.seen[n-1].State != controlapi.MigrationCompleted {
			return fmt.Errorf("states seen %+v", seen.seen)
		}
		return nil
	})
	seen.mu.Lock()
	defer seen.mu.Unlock()
	var active []time.Time
	for i, s := range seen.seen {
		if s.State == controlapi.MigrationActive {
			active = append(active, seen.at[i])
		}
	}
	if len(active) < 2 || seen.seen[len(seen.seen)-1].State != controlapi.MigrationCompleted {
		t.Fatalf("states written %+v: want progress while active (twice or more) and completed last", seen.seen)
	}
	// Progress, not every poll: at most one write per Report (and the first).
	if span := active[len(active)-1].Sub(active[0]); len(active) > int(span/reportEvery)+2 {
		t.Errorf("%d active states written in %v: more than one per %v", len(active), span, reportEvery)
	}
}

// TestAgentRestartMidMigration: a source agent stopped mid-stream breaks it; the next agent
// asks the runner before anything, does not start the send again, and reports its failure,
// whether it finds the runner still sending or already failed.
func TestAgentRestartMidMigration(t *testing.T) {
	for i, afterFailure := range []bool{false, true} {
		t.Run(fmt.Sprintf("runner failed first: %v", afterFailure), func(t *testing.T) {
			a, b := newNode(t, fmt.Sprintf("mig-c%d", i)), newNode(t, fmt.Sprintf("mig-d%d", i))
			b.start(t)
			source, target, runner, q, receiver := migrationPair(t, a, b, 256<<20, 50*time.Millisecond)
			_, stop := a.start(t)
			annotate(t, source, map[string]any{vmv1.AnnotationMigrateTo: receiver + "/" + string(target.UID)})
			annotation(t, source, vmv1.AnnotationMigrationState, 20*time.Second, func(v string) error {
				var st controlapi.MigrationStatus
				if json.Unmarshal([]byte(v), &st) != nil || st.State != controlapi.MigrationActive || st.TransferredBytes == 0 {
					return fmt.Errorf("state %q", v)
				}
				return nil
			})
			stop()
			if afterFailure {
				kubeapi.Eventually(t, "the runner's send failed", 10*time.Second, func() error {
					runner.mu.Lock()
					defer runner.mu.Unlock()
					if runner.st.State != controlapi.MigrationFailed {
						return fmt.Errorf("runner state %s", runner.st.State)
					}
					return nil
				})
			}
			a.start(t)
			st := stateIs(t, source, controlapi.MigrationFailed, 30*time.Second)
			if !strings.Contains(st.Error, "Unable to write to socket") {
				t.Errorf("failure %q, want the runner's", st.Error)
			}
			if puts, _ := runner.counts(); puts != 1 {
				t.Errorf("runner got %d PUTs, want 1 (the restarted agent must not start over)", puts)
			}
			<-q.done
			if q.n >= 256<<20 {
				t.Errorf("the target got the whole stream (%d bytes) from an agent that stopped", q.n)
			}
		})
	}
}

// TestCancel: taking migrate-to back while the stream runs cancels it at the runner.
func TestCancel(t *testing.T) {
	a, b := newNode(t, "mig-e"), newNode(t, "mig-f")
	b.start(t)
	source, target, runner, _, receiver := migrationPair(t, a, b, 256<<20, 50*time.Millisecond)
	a.start(t)
	annotate(t, source, map[string]any{vmv1.AnnotationMigrateTo: receiver + "/" + string(target.UID)})
	stateIs(t, source, controlapi.MigrationActive, 20*time.Second)
	annotate(t, source, map[string]any{vmv1.AnnotationMigrateTo: nil})
	stateIs(t, source, controlapi.MigrationCancelled, 20*time.Second)
	if puts, dels := runner.counts(); puts != 1 || dels != 1 {
		t.Errorf("runner got %d PUTs and %d DELETEs, want 1 and 1", puts, dels)
	}
}

// TestSourceRefused: a migrate-to naming a pod that is not the migration's target is refused
// (by the source's agent, which checks it against the migration); the runner is never asked to
// send, and the refusal is the state.
func TestSourceRefused(t *testing.T) {
	a, b := newNode(t, "mig-g"), newNode(t, "mig-h")
	b.start(t)
	source, target, runner, q, receiver := migrationPair(t, a, b, 1<<20, 0)
	bystander := runnerPod(t, target.Namespace, "other-runner", b.Name, nil, nil)
	a.start(t)
	annotate(t, source, map[string]any{vmv1.AnnotationMigrateTo: receiver + "/" + string(bystander.UID)})
	st := stateIs(t, source, controlapi.MigrationFailed, 20*time.Second)
	if !strings.Contains(st.Error, "names pod UID "+string(bystander.UID)+", but migration") {
		t.Errorf("failure %q, want the refusal of a target the migration does not name", st.Error)
	}
	if puts, _ := runner.counts(); puts != 0 || q.connections() != 0 {
		t.Errorf("%d PUTs, %d connections to the target QEMU; want none", puts, q.connections())
	}
}

// TestResume: migration-resume on a source whose send completed has the runner resume it;
// after an agent restart a runner no longer completed is not asked again.
func TestResume(t *testing.T) {
	ns := namespace(t)
	a := newNode(t, "mig-i")
	done := newSourceRunner(controlapi.MigrationStatus{Role: controlapi.RoleSource, State: controlapi.MigrationCompleted}, 0, 0)
	idle := newSourceRunner(controlapi.MigrationStatus{State: controlapi.MigrationNone}, 0, 0)
	p1 := runnerPod(t, ns, "one-runner", a.Name, nil, map[string]string{vmv1.AnnotationMigrationResume: "true"})
	p2 := runnerPod(t, ns, "two-runner", a.Name, nil, map[string]string{vmv1.AnnotationMigrationResume: "true"})
	done.serve(t, a.Dir(p1, "control1"))
	idle.serve(t, a.Dir(p2, "control2"))
	_, stop := a.start(t)
	st := stateIs(t, p1, controlapi.MigrationNone, 20*time.Second)
	if st.Role != controlapi.RoleSource {
		t.Errorf("state after resume %+v", st)
	}
	stop()
	a.start(t)
	later := newSourceRunner(controlapi.MigrationStatus{Role: controlapi.RoleSource, State: controlapi.MigrationCompleted}, 0, 0)
	p3 := runnerPod(t, ns, "three-runner", a.Name, nil, nil)
	later.serve(t, a.Dir(p3, "control3"))
	annotate(t, p3, map[string]any{vmv1.AnnotationMigrationResume: "true"})
	stateIs(t, p3, controlapi.MigrationNone, 20*time.Second)
	for name, r := range map[string]*sourceRunner{"completed": done, "idle": idle, "later": later} {
		want := map[string]int{"completed": 1, "idle": 0, "later": 1}[name]
		if _, dels := r.counts(); dels != want {
			t.Errorf("%s runner got %d DELETEs, want %d", name, dels, want)
		}
	}
}

// TestResumeAgain: a source pod resumed once (its first migration failed after sending all) is
// resumed again when a later migration from it fails the same way: the controller's next mark
// takes the first resume back, and the agent must not hold on to having done it.
func TestResumeAgain(t *testing.T) {
	ns := namespace(t)
	a := newNode(t, "mig-l")
	r := newSourceRunner(controlapi.MigrationStatus{Role: controlapi.RoleSource, State: controlapi.MigrationCompleted}, 0, 0)
	p := runnerPod(t, ns, "again-runner", a.Name, nil, map[string]string{vmv1.AnnotationMigrationResume: "true"})
	r.serve(t, a.Dir(p, "control-again"))
	e, _ := a.start(t)
	stateIs(t, p, controlapi.MigrationNone, 20*time.Second)

	// The next migration's mark takes the resume back; it sends all and fails at the target.
	annotate(t, p, map[string]any{vmv1.AnnotationMigrationResume: nil})
	// Give the agent the removal's event before the next resume (the check below says what a
	// user sees if it holds on to the first).
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		e.mu.Lock()
		held := e.resumed[p.UID]
		e.mu.Unlock()
		if !held {
			break
		}
	}
	r.mu.Lock()
	r.st = controlapi.MigrationStatus{Role: controlapi.RoleSource, State: controlapi.MigrationCompleted}
	r.mu.Unlock()
	annotate(t, p, map[string]any{vmv1.AnnotationMigrationResume: "true"})
	kubeapi.Eventually(t, "the second resume", 20*time.Second, func() error {
		if _, dels := r.counts(); dels != 2 {
			return fmt.Errorf("the runner got %d DELETEs, want 2: the second failed send was not resumed (the guest stays paused)", dels)
		}
		return nil
	})
}

// TestSourceDialsOnlyTheTargetsAgent: a migrate-to naming any other address than the target
// node's agent pod (which the API says) is refused before anything is dialled; the address
// named gets no connection and the runner is never asked.
func TestSourceDialsOnlyTheTargetsAgent(t *testing.T) {
	a, b := newNode(t, "mig-j"), newNode(t, "mig-k")
	b.start(t)
	source, target, runner, q, receiver := migrationPair(t, a, b, 1<<20, 0)
	trap, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer trap.Close()
	var dialled atomic.Int32
	go func() {
		for {
			c, err := trap.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			c.Close()
		}
	}()
	a.start(t)
	annotate(t, source, map[string]any{vmv1.AnnotationMigrateTo: trap.Addr().String() + "/" + string(target.UID)})
	st := stateIs(t, source, controlapi.MigrationFailed, 20*time.Second)
	if want := "the agent of target node " + b.Name + " is at " + receiver; !strings.Contains(st.Error, want) {
		t.Errorf("failure %q, want %q", st.Error, want)
	}
	if n := dialled.Load(); n != 0 {
		t.Errorf("the source agent dialled the migrate-to's address %d times", n)
	}
	if puts, _ := runner.counts(); puts != 0 || q.connections() != 0 {
		t.Errorf("%d PUTs, %d connections to the target QEMU; want none", puts, q.connections())
	}
}
