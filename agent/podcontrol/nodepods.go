package podcontrol

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Handler does what one runner pod asks of the node agent now. An error is logged and the pod
// tried again with back-off; after > 0 asks to look again then; otherwise the pod's next event
// brings it back.
type Handler func(ctx context.Context, pod *corev1.Pod) (after time.Duration, err error)

// GoneIsDone makes an API server's NotFound the end of a pod's handling (the pod went
// meanwhile), not a failure to retry: for handlers whose every read and write is of the pod.
func GoneIsDone(h Handler) Handler {
	return func(ctx context.Context, pod *corev1.Pod) (time.Duration, error) {
		after, err := h(ctx, pod)
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		return after, err
	}
}

// NodePods follows the runner pods on one node (the node agent's executors each run one): an
// informer narrowed to the node and the managed-by label, a rate-limited queue, and workers
// calling a Handler per pod. The queue never hands one pod to two workers at once.
type NodePods struct {
	factory informers.SharedInformerFactory
	pods    cache.SharedIndexInformer
	lister  listerscorev1.PodLister
	q       workqueue.TypedRateLimitingInterface[string]
	log     *zap.Logger
	retry   string
}

// RunnerPodSelector narrows a watch to runner pods: virtpod's pods but copier and attachment
// pods.
const RunnerPodSelector = vmv1.LabelManagedBy + "=" + vmv1.ManagedBy + ",!" + vmv1.LabelCopierOf + ",!" + vmv1.LabelAttachmentOf

// WatchOptions shape a NodePods.
type WatchOptions struct {
	// Indexers are added to the informer before it starts.
	Indexers cache.Indexers
	// MaxDelay is the longest back-off of a pod whose handler keeps failing.
	MaxDelay time.Duration
	// Retrying is the log message of a failed handler ("… not done; retrying").
	Retrying string
	Log      *zap.Logger
}

// WatchNode starts following the runner pods on node (not copier or attachment pods) and waits
// for the informer's first list.
// Nothing is handled before Run.
func WatchNode(ctx context.Context, c kubernetes.Interface, node string, o WatchOptions) (*NodePods, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = time.Minute
	}
	// The label only narrows the watch: anyone may set it. Handlers ask whose pod it is
	// (Authorize).
	f := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		// A snapshot's copier pod and a hotplugged disk's attachment pod are virtpod's too, but
		// no runners: the snapshot and hotplug executors read them by name.
		lo.LabelSelector = RunnerPodSelector
	}))
	pods := f.Core().V1().Pods()
	if len(o.Indexers) > 0 {
		if err := pods.Informer().AddIndexers(o.Indexers); err != nil {
			return nil, err
		}
	}
	w := &NodePods{
		factory: f, pods: pods.Informer(), lister: pods.Lister(), log: o.Log, retry: o.Retrying,
		q: workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, o.MaxDelay)),
	}
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			w.q.Add(key)
		}
	}
	if _, err := w.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return w, nil
}

// Lister reads the node's runner pods from the informer's cache.
func (w *NodePods) Lister() listerscorev1.PodLister { return w.lister }

// Indexer is the informer's cache, with WatchOptions.Indexers.
func (w *NodePods) Indexer() cache.Indexer { return w.pods.GetIndexer() }

// Add asks for pod key (namespace/name) to be handled again.
func (w *NodePods) Add(key string) { w.q.Add(key) }

// Run hands the pods to workers handlers until ctx ends and they have returned. A pod gone from
// the cache is not handled.
func (w *NodePods) Run(ctx context.Context, workers int, handle Handler) {
	go func() { <-ctx.Done(); w.q.ShutDown() }()
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for w.next(ctx, handle) {
			}
		})
	}
	wg.Wait()
}

// next handles one pod off the queue; false once the queue is shut down.
func (w *NodePods) next(ctx context.Context, handle Handler) bool {
	key, stop := w.q.Get()
	if stop {
		return false
	}
	defer w.q.Done(key)
	var after time.Duration
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	pod, err := w.lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		err = nil
	} else if err == nil {
		after, err = handle(ctx, pod)
	}
	switch {
	case err != nil && ctx.Err() == nil:
		w.log.Warn(w.retry, zap.String("pod", key), zap.Error(err))
		w.q.AddRateLimited(key)
	case after > 0:
		w.q.Forget(key)
		w.q.AddAfter(key, after)
	default:
		w.q.Forget(key)
	}
	return true
}

// Shutdown stops the informer; call it once Run has returned and nothing reads the cache.
func (w *NodePods) Shutdown() { w.factory.Shutdown() }
