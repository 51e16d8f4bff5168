package hotplug

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/virtpod/virtpod/agent/podcontrol"
	"github.com/virtpod/virtpod/agent/podcontrol/podcontroltest"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var env *kubeapi.Env

func TestMain(m *testing.M) { kubeapi.Main(m, &env) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// knobs make a case differ from a hotplug the controller asks for as it should.
type knobs struct {
	attOwner *types.UID      // the UID the attachment's controller reference names (the VM's)
	attNode  string          // the attachment's node (the agent's)
	attPhase corev1.PodPhase // the attachment's phase (Running)
	attDisk  string          // its attached-disk label (data)
	attTo    string          // its attached-to label (the runner pod's UID)
	noSocket bool            // the attachment serves nothing
	noPod    bool            // the VM's status names an attachment pod that does not exist
	unnamed  bool            // the VM's status does not name the runner pod
}

// hpCase is one runner pod asked to hotplug: its VM's status has disk boot (the pod's own, slot
// 0) and disk data (served by an attachment pod, slot 1, being attached).
type hpCase struct {
	name      string
	vm        *vmv1.VirtualMachine
	pod, att  *corev1.Pod
	runner    *podcontroltest.Runner
	runnerDir string
	attDir    string
	server    *nbdServer

	mu      sync.Mutex
	reached map[string]string // what each socket of a request answered the runner, by socket
}

// nbdServer stands for an attachment's qemu-nbd: it answers each connection with its name.
type nbdServer struct {
	l     net.Listener
	conns chan struct{}
}

func serveNBD(t *testing.T, path, hello string) *nbdServer {
	t.Helper()
	l, err := net.Listen("unix", path)
	must(t, err)
	t.Cleanup(func() { l.Close() })
	s := &nbdServer{l: l, conns: make(chan struct{}, 64)}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.conns <- struct{}{}
			_, _ = io.WriteString(c, hello)
			c.Close()
		}
	}()
	return s
}

// digests are the digests setDisks wrote on each VM's runner pod, by VM name, as the controller
// writes them.
var digests sync.Map

func digest(name string) string {
	d, _ := digests.Load(name)
	s, _ := d.(string)
	return s
}

// newCase makes, as the controller would, the VM, its running runner pod on node marked for
// hotplug, the VM's status naming the pod and its disks, the attachment pod of disk data and its
// control directory serving disk.sock, and a fake runner that, asked for its disks, connects to
// each socket of the request and answers that the guest has every disk asked: changed by k.
func newCase(t *testing.T, ns string, node *podcontroltest.Node, name string, k knobs) *hpCase {
	t.Helper()
	ctx := context.Background()
	c := env.Client
	hc := &hpCase{name: name, reached: map[string]string{}}
	hc.vm = podcontroltest.VM(t, c, ns, name)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-runner",
		Labels:      map[string]string{vmv1.LabelManagedBy: vmv1.ManagedBy},
		Annotations: map[string]string{vmv1.AnnotationHotplug: "none yet"}},
		// The runner pod was started with disk boot on slot 0: it serves it itself.
		Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: vmv1.RunnerContainer, Image: "runner",
			Args: []string{"--disk=name=boot,kind=empty,path=/virtpod/disks/boot,size-mib=1,slot=0", "--hotplug-slots=4"}}}}}
	podcontroltest.Own(pod, hc.vm)
	must(t, c.Create(ctx, pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning}
	must(t, c.Status().Update(ctx, pod))
	if !k.unnamed {
		podcontroltest.Name(t, c, hc.vm, pod)
	}
	hc.pod = pod
	setDisks(t, hc.vm, []vmv1.HotplugDiskStatus{
		{Name: "boot", State: vmv1.DiskAttached, Slot: 0},
		{Name: "data", State: vmv1.DiskAttaching, Slot: 1, AttachmentPod: name + "-hp-data"},
	})
	if !k.noPod {
		hc.att = attachmentPod(t, hc.vm, pod, "data", k)
		hc.attDir = node.Dir(hc.att, "a-"+name)
		must(t, os.MkdirAll(hc.attDir, 0o700))
		if !k.noSocket {
			hc.server = serveNBD(t, filepath.Join(hc.attDir, controlapi.AttachmentSocket), "nbd:"+name)
		}
	}
	hc.runner = &podcontroltest.Runner{}
	hc.runnerDir = node.Dir(pod, "r-"+name)
	hc.runner.AnswerFunc(http.MethodPut, controlapi.HotplugPath, hc.answer)
	hc.runner.Serve(t, hc.runnerDir)
	return hc
}

// setDisks writes the VM's status.disks, then their digest on its runner pod, as the controller
// does.
func setDisks(t *testing.T, vm *vmv1.VirtualMachine, disks []vmv1.HotplugDiskStatus) {
	t.Helper()
	ctx := context.Background()
	cur := &vmv1.VirtualMachine{}
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(vm), cur))
	cur.Status.Disks = disks
	must(t, env.Client.Status().Update(ctx, cur))
	d := vmv1.HotplugDigest(disks)
	digests.Store(vm.Name, d)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: vm.Name + "-runner"}}
	patch := `{"metadata":{"annotations":{"` + vmv1.AnnotationHotplug + `":"` + d + `"}}}`
	must(t, env.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(patch))))
}

// attachmentPod creates the running attachment pod of disk for the runner pod, as pkg/podspec
// makes it: changed by k.
func attachmentPod(t *testing.T, vm *vmv1.VirtualMachine, runner *corev1.Pod, disk string, k knobs) *corev1.Pod {
	t.Helper()
	ownerUID, nodeName, phase, diskLabel, to := vm.UID, runner.Spec.NodeName, corev1.PodRunning, disk, string(runner.UID)
	if k.attOwner != nil {
		ownerUID = *k.attOwner
	}
	if k.attNode != "" {
		nodeName = k.attNode
	}
	if k.attPhase != "" {
		phase = k.attPhase
	}
	if k.attDisk != "" {
		diskLabel = k.attDisk
	}
	if k.attTo != "" {
		to = k.attTo
	}
	att := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: vm.Name + "-hp-" + disk,
		Labels: map[string]string{vmv1.LabelManagedBy: vmv1.ManagedBy, vmv1.LabelAttachmentOf: vm.Name, vmv1.LabelAttachedDisk: diskLabel, vmv1.LabelAttachedTo: to},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: vmv1.GroupVersion.String(), Kind: "VirtualMachine", Name: vm.Name, UID: ownerUID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: nodeName, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: vmv1.AttachmentContainer, Image: "runner", Args: []string{"disk-serve"}}}}}
	must(t, env.Client.Create(context.Background(), att))
	att.Status = corev1.PodStatus{Phase: phase}
	must(t, env.Client.Status().Update(context.Background(), att))
	return att
}

// answer is the fake runner's PUT /v1/hotplug: it reaches each socket asked, and the guest
// then has every disk of the request.
func (hc *hpCase) answer(req podcontroltest.Request) (int, any) {
	var hr controlapi.HotplugRequest
	if err := req.Decode(&hr); err != nil {
		return http.StatusBadRequest, map[string]string{"error": err.Error()}
	}
	st := controlapi.HotplugStatus{Disks: []controlapi.HotplugDiskState{}}
	for _, d := range hr.Disks {
		if d.Socket != "" {
			hc.reach(d.Socket)
		}
		st.Disks = append(st.Disks, controlapi.HotplugDiskState{Name: d.Name, Slot: d.Slot, State: controlapi.DiskStateAttached})
	}
	return http.StatusOK, st
}

func (hc *hpCase) reach(sock string) {
	msg := "unreachable"
	if c, err := net.DialTimeout("unix", filepath.Join(hc.runnerDir, sock), 5*time.Second); err == nil {
		b, _ := io.ReadAll(c)
		c.Close()
		msg = string(b)
	}
	hc.mu.Lock()
	hc.reached[sock] = msg
	hc.mu.Unlock()
}

// reachedBy is what socket answered the runner, "" if it was not asked.
func (hc *hpCase) reachedBy(sock string) string {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return hc.reached[sock]
}

// requests are the hotplug requests the runner got.
func (hc *hpCase) requests(t *testing.T) []controlapi.HotplugRequest {
	t.Helper()
	var out []controlapi.HotplugRequest
	for _, r := range hc.runner.Requests(http.MethodPut, controlapi.HotplugPath) {
		var hr controlapi.HotplugRequest
		must(t, r.Decode(&hr))
		out = append(out, hr)
	}
	return out
}

// result is the agent's answer on the runner pod, or nil.
func (hc *hpCase) result(t *testing.T) *controlapi.HotplugResult {
	t.Helper()
	return result(podcontroltest.Current(t, env.Client, hc.pod))
}

// linked says whether the runner's directory has disk's link, and that it is the attachment's
// socket itself.
func (hc *hpCase) linked(t *testing.T, disk string) bool {
	t.Helper()
	fi, err := os.Lstat(filepath.Join(hc.runnerDir, controlapi.HotplugSocket(disk)))
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	must(t, err)
	src, err := os.Lstat(filepath.Join(hc.attDir, controlapi.AttachmentSocket))
	must(t, err)
	if !os.SameFile(fi, src) {
		t.Errorf("%s: the link of %s is not the attachment's socket: %v", hc.name, disk, fi.Sys().(*syscall.Stat_t).Ino)
	}
	return true
}

func (hc *hpCase) executor(t *testing.T, node *podcontroltest.Node) *Executor {
	return &Executor{Agent: node.Agent(t, env), Timeout: 10 * time.Second, Ready: 500 * time.Millisecond}
}

var wantRequest = controlapi.HotplugRequest{Disks: []controlapi.HotplugDisk{
	{Name: "boot", Slot: 0},
	{Name: "data", Slot: 1, Socket: controlapi.HotplugSocket("data")},
}}

// TestExecutorAttaches: the attachment's socket is linked into the runner's directory before
// the runner is asked, the runner is asked for every disk of the VM's status on its slot, and
// its answer is written for the digest; the pod is not handled again. An attachment pod the VM's
// status does not name is never linked.
func TestExecutorAttaches(t *testing.T) {
	ns := podcontroltest.Namespace(t, env.Client, "hotplug-")
	node := podcontroltest.NewNode(t, "node-attach")
	hc := newCase(t, ns, node, "ok", knobs{})
	unnamed := attachmentPod(t, hc.vm, hc.pod, "extra", knobs{})
	extraDir := node.Dir(unnamed, "a-extra")
	must(t, os.MkdirAll(extraDir, 0o700))
	serveNBD(t, filepath.Join(extraDir, controlapi.AttachmentSocket), "extra")
	e := hc.executor(t, node)
	if err := e.handle(context.Background(), podcontroltest.Current(t, env.Client, hc.pod)); err != nil {
		t.Fatal(err)
	}
	if got := hc.requests(t); len(got) != 1 || !reflect.DeepEqual(got[0], wantRequest) {
		t.Fatalf("the runner was asked %+v, want once %+v", got, wantRequest)
	}
	if err := wantRequest.Validate(vmv1.HotplugSlots); err != nil {
		t.Errorf("the runner would refuse the request: %v", err)
	}
	if got := hc.reachedBy(controlapi.HotplugSocket("data")); got != "nbd:ok" {
		t.Errorf("the runner reached %q through the link, want the attachment's server", got)
	}
	if !hc.linked(t, "data") || hc.linked(t, "extra") {
		t.Error("want data's link alone")
	}
	res := hc.result(t)
	want := controlapi.HotplugResult{For: digest("ok"), Status: controlapi.HotplugStatus{Disks: []controlapi.HotplugDiskState{
		{Name: "boot", Slot: 0, State: controlapi.DiskStateAttached}, {Name: "data", Slot: 1, State: controlapi.DiskStateAttached}}}}
	if res == nil || !reflect.DeepEqual(*res, want) {
		t.Fatalf("the result is %+v, want %+v", res, want)
	}
	// Once answered, another look (a fresh executor: from the pod's answer) asks nothing.
	for _, again := range []*Executor{e, hc.executor(t, node)} {
		if err := again.handle(context.Background(), podcontroltest.Current(t, env.Client, hc.pod)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(hc.requests(t)); n != 1 {
		t.Errorf("the runner was asked %d times, want once", n)
	}
}

// TestExecutorRefuses: a disk whose attachment pod the VM's objects do not vouch for, or that
// does not serve, is neither linked nor asked for, and the answer says why (the runner still
// gets the VM's other disks); a runner pod the VM does not name is asked nothing, and gets
// nothing written. Each case differs from one the agent attaches (TestExecutorAttaches) in one
// thing.
func TestExecutorRefuses(t *testing.T) {
	ns := podcontroltest.Namespace(t, env.Client, "hotplug-")
	node := podcontroltest.NewNode(t, "node-refuses")
	stranger := types.UID("7d5f6e0c-0000-4000-8000-000000000000")
	for _, c := range []struct {
		name string
		k    knobs
		want string // in the answer's error; "" for no answer at all
	}{
		{"othervm", knobs{attOwner: &stranger}, "is not VirtualMachine othervm's attachment pod"},
		{"elsewhere", knobs{attNode: "node-other"}, "runs on node node-other"},
		{"pending", knobs{attPhase: corev1.PodPending}, "is Pending, not running yet"},
		{"failed", knobs{attPhase: corev1.PodFailed}, "has ended"},
		{"disk", knobs{attDisk: "other"}, "serves another disk or runner pod"},
		{"runner", knobs{attTo: string(stranger)}, "serves another disk or runner pod"},
		{"missing", knobs{noPod: true}, "does not exist"},
		{"nosocket", knobs{noSocket: true}, "does not serve disk.sock yet"},
		{"unnamed", knobs{unnamed: true}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			hc := newCase(t, ns, node, c.name, c.k)
			err := hc.executor(t, node).handle(context.Background(), podcontroltest.Current(t, env.Client, hc.pod))
			if err == nil {
				t.Error("handled as done; want it tried again")
			}
			if hc.att != nil && hc.linked(t, "data") {
				t.Error("data's socket was linked")
			}
			res := hc.result(t)
			if c.want == "" {
				if n := len(hc.requests(t)); n != 0 || res != nil {
					t.Errorf("the runner got %d requests and the pod the result %+v; want neither", n, res)
				}
				return
			}
			want := controlapi.HotplugRequest{Disks: wantRequest.Disks[:1]}
			if got := hc.requests(t); len(got) != 1 || !reflect.DeepEqual(got[0], want) {
				t.Errorf("the runner was asked %+v, want once %+v", got, want)
			}
			if res == nil || res.For != digest(c.name) || !strings.Contains(res.Status.Error, "disk data: ") || !strings.Contains(res.Status.Error, c.want) {
				t.Errorf("the result is %+v, want data's refusal %q", res, c.want)
			}
		})
	}
}

// TestExecutorKeepsAndDetaches: a disk on its way out is not asked for and its link goes once the
// guest let it go; a disk the guest has is kept while its attachment pod cannot be vouched for
// now (here: not running), with its link, and the pod is tried again.
func TestExecutorKeepsAndDetaches(t *testing.T) {
	ns := podcontroltest.Namespace(t, env.Client, "hotplug-")
	node := podcontroltest.NewNode(t, "node-detach")
	hc := newCase(t, ns, node, "detach", knobs{attPhase: corev1.PodPending})
	setDisks(t, hc.vm, []vmv1.HotplugDiskStatus{
		{Name: "boot", State: vmv1.DiskAttached, Slot: 0},
		{Name: "data", State: vmv1.DiskAttached, Slot: 1, AttachmentPod: hc.att.Name},
		{Name: "old", State: vmv1.DiskDetaching, Slot: 2, AttachmentPod: "detach-hp-old"},
	})
	for _, d := range []string{"data", "old"} {
		serveNBD(t, filepath.Join(hc.runnerDir, controlapi.HotplugSocket(d)), "earlier link")
	}
	prev, _ := json.Marshal(controlapi.HotplugResult{For: "d-before", Status: controlapi.HotplugStatus{Disks: []controlapi.HotplugDiskState{
		{Name: "boot", Slot: 0, State: controlapi.DiskStateAttached}, {Name: "data", Slot: 1, State: controlapi.DiskStateAttached},
		{Name: "old", Slot: 2, State: controlapi.DiskStateAttached}}}})
	must(t, env.Client.Patch(context.Background(), hc.pod, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+vmv1.AnnotationHotplugResult+`":`+string(mustJSON(t, string(prev)))+`}}}`))))
	if err := hc.executor(t, node).handle(context.Background(), podcontroltest.Current(t, env.Client, hc.pod)); err == nil {
		t.Error("handled as done; want it tried again until data's attachment serves")
	}
	if got := hc.requests(t); len(got) != 1 || !reflect.DeepEqual(got[0], wantRequest) {
		t.Errorf("the runner was asked %+v, want once %+v", got, wantRequest)
	}
	if _, err := os.Lstat(filepath.Join(hc.runnerDir, controlapi.HotplugSocket("old"))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old's link outlived the disk: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(hc.runnerDir, controlapi.HotplugSocket("data"))); err != nil {
		t.Errorf("data's link went: %v", err)
	}
	if res := hc.result(t); res == nil || res.For != digest("detach") || len(res.Status.Disks) != 2 ||
		!strings.Contains(res.Status.Error, "disk data: kept as the guest has it, but attachment pod detach-hp-data is Pending") {
		t.Errorf("the result is %+v, want boot and data attached, data's attachment not vouched for", res)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	must(t, err)
	return b
}

// TestExecutorInTheLoop: the running agent attaches a disk whose attachment serves late, by
// trying again, and answers; it follows runner pods only, never an attachment pod.
func TestExecutorInTheLoop(t *testing.T) {
	ns := podcontroltest.Namespace(t, env.Client, "hotplug-")
	node := podcontroltest.NewNode(t, "node-loop")
	hc := newCase(t, ns, node, "late", knobs{noSocket: true})
	e := hc.executor(t, node)
	podcontroltest.Run(t, e.Run)
	kubeapi.Eventually(t, "a first answer", 30*time.Second, func() error {
		if hc.result(t) == nil {
			return errors.New("no answer yet")
		}
		return nil
	})
	serveNBD(t, filepath.Join(hc.attDir, controlapi.AttachmentSocket), "nbd:late")
	kubeapi.Eventually(t, "the disk attached", 30*time.Second, func() error {
		if res := hc.result(t); res == nil || res.Status.Error != "" {
			return errors.New("not attached yet")
		}
		return nil
	})
	if !hc.linked(t, "data") || hc.reachedBy(controlapi.HotplugSocket("data")) != "nbd:late" {
		t.Errorf("data: linked %v, the runner reached %q", hc.linked(t, "data"), hc.reachedBy(controlapi.HotplugSocket("data")))
	}

	ctx, cancel := context.WithCancel(context.Background())
	w, err := podcontrol.WatchNode(ctx, node.Agent(t, env).Client, node.Name, podcontrol.WatchOptions{})
	must(t, err)
	defer w.Shutdown()
	defer cancel() // before Shutdown, which waits for the informer to stop
	pods, err := w.Lister().Pods(ns).List(labels.Everything())
	must(t, err)
	if len(pods) != 1 || pods[0].Name != hc.pod.Name {
		var names []string
		for _, p := range pods {
			names = append(names, p.Name)
		}
		t.Errorf("the node's watch has %v, want the runner pod alone", names)
	}
}

// TestExecutorRunnerAnswers: a refusal without the runner's view writes nothing (the guest's
// disks are not known) and is tried again; a disk the guest did not release is answered, with
// the runner's reason, and tried again.
func TestExecutorRunnerAnswers(t *testing.T) {
	ns := podcontroltest.Namespace(t, env.Client, "hotplug-")
	node := podcontroltest.NewNode(t, "node-answers")
	refused := newCase(t, ns, node, "refused", knobs{})
	refused.runner.Fail(http.MethodPut, controlapi.HotplugPath, http.StatusConflict, "a hotplug is under way")
	err := refused.executor(t, node).handle(context.Background(), podcontroltest.Current(t, env.Client, refused.pod))
	if err == nil || !strings.Contains(err.Error(), "a hotplug is under way") {
		t.Errorf("handle = %v, want the runner's refusal", err)
	}
	if res := refused.result(t); res != nil {
		t.Errorf("a result without the runner's view: %+v", res)
	}

	held := newCase(t, ns, node, "held", knobs{})
	st := controlapi.HotplugStatus{Error: "disk old was not released in 30s", Disks: []controlapi.HotplugDiskState{
		{Name: "boot", Slot: 0, State: controlapi.DiskStateAttached}, {Name: "data", Slot: 1, State: controlapi.DiskStateAttached},
		{Name: "old", Slot: 2, State: controlapi.DiskStateDetaching, Error: "the guest did not release it"}}}
	held.runner.Answer(http.MethodPut, controlapi.HotplugPath, http.StatusOK, st)
	if err := held.executor(t, node).handle(context.Background(), podcontroltest.Current(t, env.Client, held.pod)); err == nil {
		t.Error("handled as done; want it tried again while old is detaching")
	}
	if res := held.result(t); res == nil || !reflect.DeepEqual(*res, controlapi.HotplugResult{For: digest("held"), Status: st}) {
		t.Errorf("the result is %+v, want the runner's status %+v", res, st)
	}
}

// TestExecutorWaitsForTheStatus: a request whose digest the VM's status does not give (a
// status read before the controller's last write) is not carried out; a disk the status lists
// without an attachment pod, which the runner pod was not started with, is not asked of the
// runner as the pod's own: it waits for its attachment pod.
func TestExecutorWaitsForTheStatus(t *testing.T) {
	ns := podcontroltest.Namespace(t, env.Client, "hotplug-")
	node := podcontroltest.NewNode(t, "node-stale")
	hc := newCase(t, ns, node, "stale", knobs{})
	must(t, env.Client.Patch(context.Background(), hc.pod, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+vmv1.AnnotationHotplug+`":"newer"}}}`))))
	err := hc.executor(t, node).handle(context.Background(), podcontroltest.Current(t, env.Client, hc.pod))
	if err == nil || !strings.Contains(err.Error(), "is not the one pod stale-runner asks for") || len(hc.requests(t)) != 0 || hc.result(t) != nil {
		t.Fatalf("handle = %v, %d requests, result %+v; want nothing done on an older status", err, len(hc.requests(t)), hc.result(t))
	}

	setDisks(t, hc.vm, []vmv1.HotplugDiskStatus{
		{Name: "boot", State: vmv1.DiskAttached, Slot: 0},
		{Name: "next", State: vmv1.DiskAttaching, Slot: 2},
	})
	if err := hc.executor(t, node).handle(context.Background(), podcontroltest.Current(t, env.Client, hc.pod)); err == nil {
		t.Error("handled as done; want it tried again until next's attachment pod runs")
	}
	got := hc.requests(t)
	if len(got) != 1 || len(got[0].Disks) != 1 || got[0].Disks[0].Name != "boot" {
		t.Errorf("the runner was asked %+v, want boot alone", got)
	}
	if res := hc.result(t); res == nil || !strings.Contains(res.Status.Error, "disk next: waiting for its attachment pod") {
		t.Errorf("the result is %+v, want next waiting", res)
	}
}
