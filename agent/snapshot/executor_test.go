package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/virtpod/virtpod/agent/podcontrol/podcontroltest"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(m, &env) }

// The guest's drives as its runner lists them: two writable ones, and the read-only cloud-init
// drive, which a snapshot never copies.
const (
	rootSize = int64(10 << 30)
	dataSize = int64(1 << 30)
)

var drives = []controlapi.Drive{
	{Drive: "root", SizeBytes: rootSize},
	{Drive: "disk-data", SizeBytes: dataSize},
	{Drive: "cidata", SizeBytes: 1 << 20, ReadOnly: true},
}

// knobs make a case differ from a snapshot the controller asks for as it should.
type knobs struct {
	base        bool               // built on a snapshot whose bitmap is s-old
	phase       vmv1.SnapshotPhase // the snapshot's phase (InProgress)
	vmName      string             // the snapshot's spec.vmName (the pod's VM)
	sourceUID   string             // the snapshot's status.sourcePodUID (the pod's)
	copierOwner *types.UID         // the UID the copier's controller reference names (the snapshot's)
	copierNode  string             // the copier's node (the agent's)
	copierPhase corev1.PodPhase    // the copier's phase (Running)
	unnamed     bool               // the VM's status does not name the pod
	answered    bool               // the pod has the snapshot's result already
	refuse      string             // the runner refuses the backup (409) with this
	drives      []controlapi.Drive // what the runner lists (drives)
}

// copyCase is one runner pod asked to copy its guest's disks for one snapshot, its copier and
// both pods' control directories on the simulated node.
type copyCase struct {
	name      string
	pod       *corev1.Pod
	snap      *vmv1.VirtualMachineSnapshot
	copier    *corev1.Pod
	runner    *podcontroltest.Runner
	runnerDir string
	copierDir string
	targets   map[string]*target // by drive
	answer    controlapi.BackupStatus

	arrived chan struct{} // closed when the runner gets the PUT, which it holds until release
	release func()
}

// target is a copier's NBD socket, as virtpod-runner disk-target serves one: each connection's
// bytes (up to the client's end) are sent on got and answered "ack:" and the bytes.
type target struct {
	path string
	got  chan string
}

func serveTarget(t *testing.T, path string) *target {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	tg := &target{path: path, got: make(chan string, 16)}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				b, _ := io.ReadAll(c)
				tg.got <- string(b)
				_, _ = io.WriteString(c, "ack:"+string(b))
			}()
		}
	}()
	return tg
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// newCase makes, as the controller would, a VM whose status names its running runner pod on
// node, the pod marked for snapshot name, the snapshot (InProgress, naming the pod, its copier,
// disks root and data), the copier pod the snapshot controls, running on node; a fake runner
// serving the pod's control socket, and the copier's NBD sockets: changed by k.
func newCase(t *testing.T, ns string, node *podcontroltest.Node, name string, k knobs) *copyCase {
	t.Helper()
	ctx := context.Background()
	c := env.Client
	cc := &copyCase{name: name, targets: map[string]*target{}, arrived: make(chan struct{})}

	vm := podcontroltest.VM(t, c, ns, name)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-runner",
		Labels:      map[string]string{vmv1.LabelManagedBy: vmv1.ManagedBy},
		Annotations: map[string]string{vmv1.AnnotationSnapshot: name}},
		Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: vmv1.RunnerContainer, Image: "runner"}}}}
	if k.answered {
		raw, _ := json.Marshal(controlapi.SnapshotResult{Snapshot: name, Status: controlapi.BackupStatus{State: controlapi.BackupCompleted}})
		pod.Annotations[vmv1.AnnotationSnapshotResult] = string(raw)
	}
	podcontroltest.Own(pod, vm)
	must(t, c.Create(ctx, pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning}
	must(t, c.Status().Update(ctx, pod))
	if !k.unnamed {
		podcontroltest.Name(t, c, vm, pod)
	}
	cc.pod = pod

	base := ""
	if k.base {
		old := &vmv1.VirtualMachineSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-old"}, Spec: vmv1.VirtualMachineSnapshotSpec{VMName: vm.Name}}
		must(t, c.Create(ctx, old))
		old.Status = vmv1.VirtualMachineSnapshotStatus{Phase: vmv1.SnapshotSucceeded, Bitmap: "s-old", SourcePod: pod.Name, SourcePodUID: string(pod.UID)}
		must(t, c.Status().Update(ctx, old))
		base = old.Name
	}
	snap := &vmv1.VirtualMachineSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: vmv1.VirtualMachineSnapshotSpec{VMName: vm.Name}}
	if k.vmName != "" {
		snap.Spec.VMName = k.vmName
	}
	must(t, c.Create(ctx, snap))
	snap.Status = vmv1.VirtualMachineSnapshotStatus{
		Phase: vmv1.SnapshotInProgress, SourcePod: pod.Name, SourcePodUID: string(pod.UID), SourceNode: node.Name,
		CopierPod: name + "-copier", Base: base, Bitmap: "s-" + name,
		Disks: []vmv1.SnapshotDisk{
			{Disk: "root", SourceClaim: name + "-root", ClaimName: name + "-root-copy"},
			{Disk: "data", SourceClaim: name + "-data", ClaimName: name + "-data-copy"},
		},
	}
	if k.phase != "" {
		snap.Status.Phase = k.phase
	}
	if k.sourceUID != "" {
		snap.Status.SourcePodUID = k.sourceUID
	}
	must(t, c.Status().Update(ctx, snap))
	cc.snap = snap

	owner := snap.UID
	if k.copierOwner != nil {
		owner = *k.copierOwner
	}
	copierNode := node.Name
	if k.copierNode != "" {
		copierNode = k.copierNode
	}
	copier := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-copier",
		Labels: map[string]string{vmv1.LabelManagedBy: vmv1.ManagedBy, vmv1.LabelCopierOf: name},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: vmv1.GroupVersion.String(), Kind: "VirtualMachineSnapshot",
			Name: name, UID: owner, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: copierNode, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "copier", Image: "runner", Args: []string{"disk-target"}}}}}
	must(t, c.Create(ctx, copier))
	copier.Status = corev1.PodStatus{Phase: corev1.PodRunning}
	if k.copierPhase != "" {
		copier.Status.Phase = k.copierPhase
	}
	must(t, c.Status().Update(ctx, copier))
	cc.copier = copier

	// The copier serves its targets; the agent finds its directory through the kubelet.
	cc.copierDir = node.Dir(copier, "c-"+name)
	must(t, os.MkdirAll(cc.copierDir, 0o700))
	for _, d := range []string{"root", "disk-data"} {
		cc.targets[d] = serveTarget(t, filepath.Join(cc.copierDir, "nbd-"+d+".sock"))
	}

	// The runner lists its drives and holds the backup until the test releases it.
	cc.answer = controlapi.BackupStatus{State: controlapi.BackupCompleted, Consistency: controlapi.ConsistencyGuestFrozen, FrozenFilesystems: 2,
		Bitmap: "s-" + name, Drives: []controlapi.BackupDriveStatus{
			{Drive: "root", Size: rootSize, Copied: rootSize, Incremental: k.base},
			{Drive: "disk-data", Size: dataSize, Copied: dataSize, Incremental: k.base},
		}}
	r := &podcontroltest.Runner{}
	list := drives
	if k.drives != nil {
		list = k.drives
	}
	r.Answer(http.MethodGet, controlapi.DrivesPath, http.StatusOK, list)
	release := make(chan struct{})
	var once, arrived sync.Once
	cc.release = func() { once.Do(func() { close(release) }) }
	t.Cleanup(cc.release) // after the executor stopped: a held PUT never outlives the test
	r.AnswerFunc(http.MethodPut, controlapi.BackupPath, func(req podcontroltest.Request) (int, any) {
		arrived.Do(func() { close(cc.arrived) })
		select {
		case <-release:
		case <-time.After(time.Minute):
		}
		if k.refuse != "" {
			return http.StatusConflict, map[string]string{"error": k.refuse}
		}
		return http.StatusOK, cc.answer
	})
	cc.runner = r
	cc.runnerDir = node.Dir(pod, "r-"+name)
	r.Serve(t, cc.runnerDir)
	return cc
}

// requests are how many requests the runner got on the drives and the backup.
func (cc *copyCase) requests() int {
	return cc.runner.Count(http.MethodGet, controlapi.DrivesPath) + cc.runner.Count(http.MethodPut, controlapi.BackupPath)
}

// result is the agent's answer on the runner pod, or nil.
func (cc *copyCase) result(t *testing.T) *controlapi.SnapshotResult {
	t.Helper()
	raw := podcontroltest.Current(t, env.Client, cc.pod).Annotations[vmv1.AnnotationSnapshotResult]
	if raw == "" {
		return nil
	}
	res := &controlapi.SnapshotResult{}
	if err := json.Unmarshal([]byte(raw), res); err != nil {
		t.Fatalf("%s: the result annotation %q: %v", cc.name, raw, err)
	}
	return res
}

// waitResult waits for the agent's answer for the case's snapshot.
func (cc *copyCase) waitResult(t *testing.T) controlapi.SnapshotResult {
	t.Helper()
	var res *controlapi.SnapshotResult
	kubeapi.Eventually(t, cc.name+": the snapshot's result on the runner pod", 30*time.Second, func() error {
		if res = cc.result(t); res == nil {
			return errors.New("no result yet")
		}
		return nil
	})
	return *res
}

// relaySockets are the agent's relay sockets left in the runner's directory.
func (cc *copyCase) relaySockets(t *testing.T) []string {
	t.Helper()
	got, err := filepath.Glob(filepath.Join(cc.runnerDir, "snapshot-*"))
	must(t, err)
	return got
}

// targetsFile is the path of the copier's targets.json.
func (cc *copyCase) targetsFile() string { return filepath.Join(cc.copierDir, TargetsFile) }

// firstArrived waits for one of the cases' runners to get its backup, and returns it; a case
// answered before (a copy that failed first) fails the test at once.
func firstArrived(t *testing.T, cases []*copyCase) *copyCase {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, cc := range cases {
			select {
			case <-cc.arrived:
				return cc
			default:
			}
			if res := cc.result(t); res != nil {
				t.Fatalf("%s: answered before the runner got the backup: %+v", cc.name, *res)
			}
		}
		select {
		case <-deadline:
			var names []string
			for _, cc := range cases {
				names = append(names, fmt.Sprintf("%s (%d drive lists)", cc.name, cc.runner.Count(http.MethodGet, controlapi.DrivesPath)))
			}
			t.Fatalf("no runner got its backup within 30s: %s", strings.Join(names, ", "))
		case <-tick.C:
		}
	}
}

// checkTargets: the copier was told the sizes of the snapshot's drives, exactly, in a file
// of the runner's user's.
func (cc *copyCase) checkTargets(t *testing.T) {
	t.Helper()
	raw, err := os.ReadFile(cc.targetsFile())
	must(t, err)
	var sizes map[string]int64
	must(t, json.Unmarshal(raw, &sizes))
	if want := map[string]int64{"root": rootSize, "disk-data": dataSize}; !reflect.DeepEqual(sizes, want) {
		t.Errorf("%s: targets.json holds %v, want %v", cc.name, sizes, want)
	}
	fi, err := os.Lstat(cc.targetsFile())
	must(t, err)
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o400 {
		t.Errorf("%s: targets.json is %v, want a file of mode 0400", cc.name, fi.Mode())
	}
	if os.Geteuid() != 0 {
		t.Logf("not root: the owner of targets.json is not checked")
		return
	}
	if st := fi.Sys().(*syscall.Stat_t); int64(st.Uid) != vmv1.RunnerUID || int64(st.Gid) != vmv1.RunnerGID {
		t.Errorf("%s: targets.json is %d:%d, want the runner's %d:%d", cc.name, st.Uid, st.Gid, vmv1.RunnerUID, vmv1.RunnerGID)
	}
}

// checkRequest: the runner was asked to push the snapshot's drives onto the relay sockets,
// starting the snapshot's bitmap, the guest frozen, since the base's bitmap if any.
func (cc *copyCase) checkRequest(t *testing.T, since string) {
	t.Helper()
	puts := cc.runner.Requests(http.MethodPut, controlapi.BackupPath)
	if len(puts) != 1 {
		t.Fatalf("%s: %d backups asked, want 1", cc.name, len(puts))
	}
	var req controlapi.BackupRequest
	must(t, puts[0].Decode(&req))
	want := controlapi.BackupRequest{Bitmap: "s-" + cc.name, Freeze: true, Drives: []controlapi.BackupDrive{
		{Drive: "root", Socket: "snapshot-root.sock", Since: since},
		{Drive: "disk-data", Socket: "snapshot-disk-data.sock", Since: since},
	}}
	if !reflect.DeepEqual(req, want) {
		t.Errorf("%s: the runner was asked %+v, want %+v", cc.name, req, want)
	}
	if err := req.Validate(); err != nil {
		t.Errorf("%s: the runner would refuse the request: %v", cc.name, err)
	}
}

// checkRelays: while the runner copies, each relay socket in its directory reaches the
// copier's target of the same drive, both ways, and a half-close passes through.
func (cc *copyCase) checkRelays(t *testing.T) {
	t.Helper()
	for _, d := range []string{"root", "disk-data"} {
		sock := filepath.Join(cc.runnerDir, "snapshot-"+d+".sock")
		fi, err := os.Lstat(sock)
		must(t, err)
		if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %s is %v, want a socket of mode 0600", cc.name, sock, fi.Mode())
		}
		if st := fi.Sys().(*syscall.Stat_t); os.Geteuid() == 0 && int64(st.Uid) != vmv1.RunnerUID {
			t.Errorf("%s: %s is uid %d, want the runner's %d", cc.name, sock, st.Uid, vmv1.RunnerUID)
		}
		conn, err := net.DialTimeout("unix", sock, 5*time.Second)
		must(t, err)
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		msg := "NBDMAGIC " + cc.name + " " + d
		if _, err := io.WriteString(conn, msg); err != nil {
			t.Fatal(err)
		}
		must(t, conn.(*net.UnixConn).CloseWrite())
		reply, err := io.ReadAll(conn)
		conn.Close()
		if err != nil || string(reply) != "ack:"+msg {
			t.Errorf("%s: %s answered %q (%v), want the copier's %q", cc.name, sock, reply, err, "ack:"+msg)
		}
		select {
		case got := <-cc.targets[d].got:
			if got != msg {
				t.Errorf("%s: the copier's %s target got %q, want %q", cc.name, d, got, msg)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: the copier's %s target got nothing", cc.name, d)
		}
	}
	for d, tg := range cc.targets {
		if n := len(tg.got); n != 0 {
			t.Errorf("%s: the copier's %s target got %d connections more", cc.name, d, n)
		}
	}
}

// TestExecutorCopies: for a runner pod the controller marked, the agent tells the copier its
// targets' sizes, relays the runner's sockets to the copier's while the runner copies, asks
// the runner once (incrementally on a base snapshot's bitmap) and writes its answer, or its
// refusal, into the pod; it removes its relays; a pod answered already is not asked again.
func TestExecutorCopies(t *testing.T) {
	ns := podcontroltest.Namespace(t, env.Client, "snapshot-")
	node := podcontroltest.NewNode(t, "node-copies")
	full := newCase(t, ns, node, "full", knobs{})
	incr := newCase(t, ns, node, "incr", knobs{base: true})
	refused := newCase(t, ns, node, "refused", knobs{refuse: "a backup is running already: wait for it to end"})
	answered := newCase(t, ns, node, "answered", knobs{answered: true})
	// The refusal is not held: a held copy takes one of the agent's workers until released.
	refused.release()
	e := &Executor{Agent: node.Agent(t, env), Timeout: 30 * time.Second, Ready: 10 * time.Second}
	podcontroltest.Run(t, e.Run)

	// Each held copy is checked while the runner holds it, in the order the runner got them.
	for pending := []*copyCase{full, incr}; len(pending) > 0; {
		cc := firstArrived(t, pending)
		pending = slices.DeleteFunc(pending, func(p *copyCase) bool { return p == cc })
		since := ""
		if cc == incr {
			since = "s-old"
		}
		cc.checkTargets(t)
		cc.checkRequest(t, since)
		cc.checkRelays(t)
		if res := cc.result(t); res != nil {
			t.Errorf("%s: a result before the runner answered: %+v", cc.name, res)
		}
		cc.release()
		res := cc.waitResult(t)
		if want := (controlapi.SnapshotResult{Snapshot: cc.name, Status: cc.answer}); !reflect.DeepEqual(res, want) {
			t.Errorf("%s: the result is %+v, want %+v", cc.name, res, want)
		}
		if got := cc.relaySockets(t); len(got) != 0 {
			t.Errorf("%s: the relays outlived the copy: %v", cc.name, got)
		}
	}

	res := refused.waitResult(t)
	if res.Snapshot != refused.name || !strings.Contains(res.Status.Error, "a backup is running already") || !strings.Contains(res.Status.Error, "409") {
		t.Errorf("refused: the result is %+v, want the runner's refusal", res)
	}
	if got := refused.relaySockets(t); len(got) != 0 {
		t.Errorf("refused: the relays outlived the copy: %v", got)
	}

	// The agent has handled every pod by now, each at least once; nor does another look at
	// an answered pod ask its runner again.
	for _, cc := range []*copyCase{full, answered} {
		pod := podcontroltest.Current(t, env.Client, cc.pod)
		if err := e.handle(context.Background(), pod); err != nil {
			t.Errorf("%s: handled again: %v", cc.name, err)
		}
	}
	if n := full.runner.Count(http.MethodPut, controlapi.BackupPath); n != 1 {
		t.Errorf("full: the runner was asked %d times, want once", n)
	}
	if n := answered.requests(); n != 0 {
		t.Errorf("answered: the runner got %d requests, want none", n)
	}
	if _, err := os.Lstat(answered.targetsFile()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("answered: the copier was told its targets again: %v", err)
	}
	if res := answered.result(t); res == nil || res.Status.State != controlapi.BackupCompleted || res.Status.Error != "" {
		t.Errorf("answered: the result was changed: %+v", res)
	}
}

// TestExecutorRefuses: a runner pod is copied from only when the controller's objects vouch
// for the pod, the snapshot and the copier: otherwise the runner is asked nothing, the copier
// told nothing and, where the snapshot does not ask for the pod, nothing is written at all.
// Each case differs from one the agent copies (TestExecutorCopies) in one thing.
func TestExecutorRefuses(t *testing.T) {
	ns := podcontroltest.Namespace(t, env.Client, "snapshot-")
	node := podcontroltest.NewNode(t, "node-refuses")
	stranger := types.UID("7d5f6e0c-0000-4000-8000-000000000000")
	for _, c := range []struct {
		name string
		k    knobs
		want string // in the error; "" for none: nothing to do
	}{
		{"owned", knobs{copierOwner: &stranger}, "is not snapshot owned's copier: refused"},
		{"elsewhere", knobs{copierNode: "node-other"}, "is not running on this node"},
		{"starting", knobs{copierPhase: corev1.PodPending}, "is not running on this node"},
		{"uid", knobs{sourceUID: "0b6c1d9e-0000-4000-8000-000000000000"}, ""},
		{"pending", knobs{phase: vmv1.SnapshotPending}, ""},
		{"succeeded", knobs{phase: vmv1.SnapshotSucceeded}, ""},
		{"othervm", knobs{vmName: "someone-else"}, ""},
		{"unnamed", knobs{unnamed: true}, "neither VirtualMachine unnamed's runner pod"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cc := newCase(t, ns, node, c.name, c.k)
			e := &Executor{Agent: node.Agent(t, env), Timeout: 10 * time.Second, Ready: 2 * time.Second, active: map[types.UID]string{}}
			err := e.handle(context.Background(), podcontroltest.Current(t, env.Client, cc.pod))
			switch {
			case c.want == "" && err != nil:
				t.Errorf("an error, want nothing to do: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("error %v, want %q", err, c.want)
			}
			if n := cc.requests(); n != 0 {
				t.Errorf("the runner got %d requests, want none", n)
			}
			if _, err := os.Lstat(cc.targetsFile()); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the copier was told its targets: %v", err)
			}
			if got := cc.relaySockets(t); len(got) != 0 {
				t.Errorf("relays opened: %v", got)
			}
			if res := cc.result(t); res != nil {
				t.Errorf("a result was written: %+v", res)
			}
		})
	}
}

// TestExecutorRefusesInTheLoop: the running agent leaves a snapshot that does not ask for
// the pod alone, and writes nothing into a pod it refuses, while it copies for a pod beside.
func TestExecutorRefusesInTheLoop(t *testing.T) {
	ns := podcontroltest.Namespace(t, env.Client, "snapshot-")
	node := podcontroltest.NewNode(t, "node-loop")
	stranger := types.UID("7d5f6e0c-0000-4000-8000-000000000001")
	refusals := []*copyCase{
		newCase(t, ns, node, "pending", knobs{phase: vmv1.SnapshotPending}),
		newCase(t, ns, node, "othervm", knobs{vmName: "someone-else"}),
		newCase(t, ns, node, "owned", knobs{copierOwner: &stranger}),
		newCase(t, ns, node, "unnamed", knobs{unnamed: true}),
	}
	ok := newCase(t, ns, node, "ok", knobs{})
	ok.release()
	e := &Executor{Agent: node.Agent(t, env), Timeout: 30 * time.Second, Ready: 10 * time.Second}
	podcontroltest.Run(t, e.Run)
	if res := ok.waitResult(t); res.Status.Error != "" {
		t.Fatalf("ok: %s", res.Status.Error)
	}
	for _, cc := range refusals {
		if n := cc.requests(); n != 0 {
			t.Errorf("%s: the runner got %d requests, want none", cc.name, n)
		}
		if _, err := os.Lstat(cc.targetsFile()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the copier was told its targets: %v", cc.name, err)
		}
		if res := cc.result(t); res != nil {
			t.Errorf("%s: a result was written: %+v", cc.name, res)
		}
	}
}

// TestExecutorMissingDrive: a snapshot of a disk the guest's runner does not have (a pod made
// before the disk) fails with the reason, and the copier is told nothing.
func TestExecutorMissingDrive(t *testing.T) {
	ns := podcontroltest.Namespace(t, env.Client, "snapshot-")
	node := podcontroltest.NewNode(t, "node-drive")
	cc := newCase(t, ns, node, "nodata", knobs{drives: drives[:1]})
	e := &Executor{Agent: node.Agent(t, env), Timeout: 10 * time.Second, Ready: 2 * time.Second, active: map[types.UID]string{}}
	if err := e.handle(context.Background(), podcontroltest.Current(t, env.Client, cc.pod)); err != nil {
		t.Fatal(err)
	}
	res := cc.result(t)
	if res == nil || res.Snapshot != "nodata" || !strings.Contains(res.Status.Error, "no writable drive disk-data (disk data)") {
		t.Fatalf("the result is %+v, want the missing drive", res)
	}
	if n := cc.runner.Count(http.MethodPut, controlapi.BackupPath); n != 0 {
		t.Errorf("the runner was asked to back up %d times", n)
	}
	if _, err := os.Lstat(cc.targetsFile()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the copier was told its targets: %v", err)
	}
}

// TestExecutorCopiesOnce: the watch can hand the agent the pod again before its cache has the
// result the agent wrote; the copy is not made again (its copier served once), and the result
// stays the first one's. Found on the local cluster: a second pass overwrote a success with
// "targets.json: file exists".
func TestExecutorCopiesOnce(t *testing.T) {
	ns := podcontroltest.Namespace(t, env.Client, "snapshot-")
	node := podcontroltest.NewNode(t, "node-once")
	cc := newCase(t, ns, node, "once", knobs{})
	cc.release()
	e := &Executor{Agent: node.Agent(t, env), Timeout: 10 * time.Second, Ready: 5 * time.Second}
	stale := podcontroltest.Current(t, env.Client, cc.pod)
	if err := e.handle(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	if err := e.handle(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	if n := cc.runner.Count(http.MethodPut, controlapi.BackupPath); n != 1 {
		t.Errorf("the runner was asked to back up %d times, want once", n)
	}
	if res := cc.result(t); res == nil || res.Status.Error != "" {
		t.Errorf("the result is %+v, want the first copy's success", res)
	}
}
