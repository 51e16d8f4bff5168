package kubeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
)

// Simulated nodes: Node objects and pod status written as a cluster's scheduler and kubelets
// would, so the controller sees its pods placed and running on many nodes with no kubelet.

// CreateNode registers a Ready node labelled as the node agent labels one that offers QEMU
// with emulation (what SampleVM's runner pod requires).
func CreateNode(ctx context.Context, c client.Client, name string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		vmv1.LabelKVM: "false", vmv1.LabelEmulation: "true", vmv1.LabelProviderPrefix + string(vmv1.ProviderQEMU): "true",
	}}}
	if err := c.Create(ctx, node); err != nil {
		return err
	}
	capacity := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"),
		corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi")}
	node.Status = corev1.NodeStatus{Capacity: capacity, Allocatable: capacity, Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}}
	return c.Status().Update(ctx, node)
}

// Kubelets plays the scheduler and the kubelets for the runner pods of one namespace: a pod
// without a node is bound to one of the scheduling nodes, a bound pod is reported Running and
// Ready with an IP, and a deleted pod is removed as its kubelet confirms the stop — except on
// nodes Cut off, whose pods stay as they are. It follows pods with an informer, so it rides out
// API server restarts.
type Kubelets struct {
	mu       sync.Mutex
	schedule []string
	cut      map[string]bool
	crash    func(pod string) bool
	crashed  map[string]bool
	suspends bool
	// snapshots: play the node agent and the copier pods of snapshots and restores.
	snapshots bool
	// hotplug: play the node agent of disk hotplug, reading VMs through it (simhotplug.go).
	hotplug client.Reader
	ips     atomic.Uint32
	requeue func() // looks at every pod again
}

// StartKubelets runs until ctx ends; new pods go to the nodes given.
func StartKubelets(ctx context.Context, cfg *rest.Config, ns string, nodes ...string) (*Kubelets, error) {
	k := &Kubelets{schedule: nodes, cut: map[string]bool{}, crashed: map[string]bool{}}
	// Protobuf, as real kubelets and schedulers speak (the kubelet's --kube-api-content-type):
	// JSON would charge the API server, and so the benchmarks, for what real nodes do not cost.
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = vmv1.LabelManagedBy + "=" + vmv1.ManagedBy }))
	pods := f.Core().V1().Pods()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](20*time.Millisecond, 2*time.Second))
	enqueue := func(o any) {
		if key, err := cache.MetaNamespaceKeyFunc(o); err == nil {
			q.Add(key)
		}
	}
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) },
	}); err != nil {
		return nil, err
	}
	k.requeue = func() {
		for _, o := range pods.Informer().GetStore().List() {
			enqueue(o)
		}
	}
	f.Start(ctx.Done())
	go func() { <-ctx.Done(); q.ShutDown() }()
	for range 8 {
		go func() {
			for {
				key, stop := q.Get()
				if stop {
					return
				}
				ns, name, _ := cache.SplitMetaNamespaceKey(key)
				pod, err := pods.Lister().Pods(ns).Get(name)
				if err == nil {
					err = k.step(ctx, cs, pod)
				}
				if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
					q.AddRateLimited(key)
				} else {
					q.Forget(key)
				}
				q.Done(key)
			}
		}()
	}
	return k, nil
}

// Schedule sends pods without a node to these nodes from now on.
func (k *Kubelets) Schedule(nodes ...string) {
	k.mu.Lock()
	k.schedule = nodes
	k.mu.Unlock()
	k.requeue() // pods left waiting for a node
}

// Cut stops the node's kubelet, as a network partition or power loss would: nothing more is
// reported for its pods.
func (k *Kubelets) Cut(node string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cut[node] = true
}

// CrashOnce makes the first pod of each name crash picks fail instead of running: the runner
// exits 1, as a guest that panics does.
func (k *Kubelets) CrashOnce(crash func(pod string) bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.crash = crash
}

// PlaySuspends makes the runners' guests start (their startup probes pass) and plays the node
// agent and the runner of a suspend: a running pod the controller asked to suspend
// (vm.virtpod.io/suspend) ends as a runner that saved its guest does.
func (k *Kubelets) PlaySuspends() {
	k.mu.Lock()
	k.suspends = true
	k.mu.Unlock()
	k.requeue()
}

// PlaySnapshots makes the runners' guests start and plays what the node side does for
// snapshots and restores: a running copier that copies files (disk-copy) ends done; for a
// runner pod the controller marked for a snapshot, the agent writes a successful copy and the
// snapshot's copier, which served it, ends done.
func (k *Kubelets) PlaySnapshots() {
	k.mu.Lock()
	k.snapshots = true
	k.mu.Unlock()
	k.requeue()
}

// playSnapshot is the node side of a snapshot or restore for pod, if any; done: it acted.
func playSnapshot(ctx context.Context, pods typedcorev1.PodInterface, pod *corev1.Pod) (done bool, err error) {
	if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
		return false, nil
	}
	if pod.Labels[vmv1.LabelCopierOf] != "" {
		if args := pod.Spec.Containers[0].Args; len(args) == 0 || args[0] != "disk-copy" {
			return false, nil // a target ends once the runner pushed into it
		}
		return true, endCopier(ctx, pods, pod.Name)
	}
	name := pod.Annotations[vmv1.AnnotationSnapshot]
	if name == "" || strings.Contains(pod.Annotations[vmv1.AnnotationSnapshotResult], `"snapshot":"`+name+`"`) {
		return false, nil
	}
	res, _ := json.Marshal(controlapi.SnapshotResult{Snapshot: name, Status: controlapi.BackupStatus{State: controlapi.BackupCompleted,
		Consistency: controlapi.ConsistencyGuestFrozen, Drives: []controlapi.BackupDriveStatus{{Drive: "root", Size: 1 << 30, Copied: 1 << 20}}}})
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{vmv1.AnnotationSnapshotResult: string(res)}}})
	if _, err := pods.Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return true, err
	}
	return true, endCopier(ctx, pods, name+"-snapshot")
}

// endCopier ends the named copier pod as one that did its copy (exit 0).
func endCopier(ctx context.Context, pods typedcorev1.PodInterface, name string) error {
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || p.Status.Phase != corev1.PodRunning {
		return err
	}
	now := metav1.Now()
	p.Status.Phase = corev1.PodSucceeded
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: now}}}}
	_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

func (k *Kubelets) step(ctx context.Context, cs *kubernetes.Clientset, pod *corev1.Pod) error {
	k.mu.Lock()
	nodes, cut, suspends, snapshots, hotplug := k.schedule, k.cut[pod.Spec.NodeName], k.suspends, k.snapshots, k.hotplug
	crash := k.crash != nil && k.crash(pod.Name) && !k.crashed[pod.Name]
	k.mu.Unlock()
	pods := cs.CoreV1().Pods(pod.Namespace)
	if snapshots && !cut {
		if done, err := playSnapshot(ctx, pods, pod); done || err != nil {
			return err
		}
	}
	if hotplug != nil && !cut {
		if done, err := playHotplug(ctx, hotplug, pods, pod); done || err != nil {
			return err
		}
	}
	switch {
	case cut:
		return nil
	case pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil && len(nodes) > 0:
		h := fnv.New32a()
		h.Write([]byte(pod.Name))
		node := nodes[int(h.Sum32())%len(nodes)]
		if n := requiredNode(pod); n != "" {
			node = n
		}
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
		return pods.Bind(ctx, b, metav1.CreateOptions{})
	case pod.DeletionTimestamp != nil:
		return pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	case suspends && pod.Status.Phase == corev1.PodRunning && pod.Annotations[vmv1.AnnotationSuspend] != "":
		p := pod.DeepCopy()
		now := metav1.Now()
		p.Status.Phase = corev1.PodSucceeded
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: vmv1.RunnerContainer, Image: pod.Spec.Containers[0].Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
				Message: vmv1.MessageSuspended + vmv1.StateFile, FinishedAt: now}}}}
		_, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	case pod.Spec.NodeName != "" && (pod.Status.Phase == corev1.PodPending || pod.Status.Phase == ""):
		n := k.ips.Add(1)
		ip := fmt.Sprintf("10.%d.%d.%d", 64+n>>16&63, n>>8&255, n&255)
		p := pod.DeepCopy()
		now := metav1.Now()
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &now,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: vmv1.RunnerContainer, Ready: true, Image: pod.Spec.Containers[0].Image,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}}
		if suspends || snapshots || hotplug != nil {
			p.Status.ContainerStatuses[0].Started = ptr.To(true)
		}
		if crash {
			p.Status.Phase = corev1.PodFailed
			p.Status.Conditions[1].Status = corev1.ConditionFalse
			p.Status.ContainerStatuses[0] = corev1.ContainerStatus{Name: vmv1.RunnerContainer, Image: pod.Spec.Containers[0].Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
					Message: "guest panicked", StartedAt: now, FinishedAt: now}}}
		}
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			return err
		}
		if crash {
			k.mu.Lock()
			k.crashed[pod.Name] = true
			k.mu.Unlock()
		}
	}
	return nil
}

// BoundClaim makes a 1Gi ReadWriteOnce Filesystem claim in ns, bound as a provisioner would
// bind it (envtest runs no PV controller).
func BoundClaim(ctx context.Context, c client.Client, ns, name string) error {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To("standard"),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if err := c.Create(ctx, pvc); err != nil {
		return err
	}
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}
	return c.Status().Update(ctx, pvc)
}
