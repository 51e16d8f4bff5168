// Package cachelag holds the controllers to deciding on what the API server holds when their
// cache lags behind it. A controller's informer can deliver its own writes late (on a loaded
// machine, seconds late); a reconcile in that gap reads the object as it was before the write.
// Here the gap is made, not waited for: the reconciler under test reads through a cache whose
// delivery of chosen objects is held back until the test lets it go, so each test is
// deterministic, and on a real API server.
package cachelag

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/manager"
	vmctrl "github.com/virtpod/virtpod/controllers/vm"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var (
	env *kubeapi.Env
	// recorder is the manager's event recorder, lent to the reconcilers under test.
	recorder events.EventRecorder
)

// labelByHand marks a VM that only the test's own reconciler acts on.
const labelByHand = "cachelag.virtpod.io/by-hand"

func TestMain(m *testing.M) { kubeapi.Main(&withVMController{m}, &env) }

// withVMController runs the VirtualMachine controller as the manager does, so the VMs' runner
// pods are the ones production makes; the reconciler under test runs only when a test calls it.
type withVMController struct{ m *testing.M }

func (w *withVMController) Run() int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := env.Client.Create(ctx, kubeapi.DefaultProviderClass()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := env.InstallAdmission(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The manager leaves alone the VMs a test reconciles by hand.
	byHand, err := labels.Parse(labelByHand + "!=true")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: manager.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{&vmv1.VirtualMachine{}: {Label: byHand}}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	r := &vmctrl.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("virtpod-controller"),
		Options: podspec.DefaultOptions(), Metrics: vmctrl.NewMetrics(prometheus.NewRegistry())}
	if err := r.SetupWithManager(mgr, 2, false); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	recorder = mgr.GetEventRecorder("virtpod-controller")
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	return w.m.Run()
}

// laggingCache is an informer cache whose delivery of the objects a test names is held back
// until the test releases it: the informer's transform blocks, so the watch's later events
// queue behind the held one, as behind a slow delivery.
type laggingCache struct {
	cache.Cache
	mu      sync.Mutex
	hold    func(obj any) bool
	release chan struct{}
	held    chan struct{} // closed once an object is being held
}

func newLaggingCache(t *testing.T) (*laggingCache, client.Client) {
	t.Helper()
	l := &laggingCache{}
	c, err := cache.New(env.Config, cache.Options{Scheme: manager.Scheme(), DefaultTransform: l.transform})
	if err != nil {
		t.Fatal(err)
	}
	l.Cache = c
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { l.Release(); cancel() })
	go func() { _ = c.Start(ctx) }()
	for _, o := range []client.Object{&corev1.Pod{}, &vmv1.VirtualMachine{}, &vmv1.VirtualMachineMigration{}, &corev1.PersistentVolumeClaim{}} {
		if _, err := c.GetInformer(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the lagging cache did not sync")
	}
	cl, err := client.New(env.Config, client.Options{Scheme: manager.Scheme(), Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		t.Fatal(err)
	}
	return l, cl
}

// Hold holds back the first delivery for which hold is true, and everything behind it, until
// Release.
func (l *laggingCache) Hold(hold func(obj any) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hold, l.release, l.held = hold, make(chan struct{}), make(chan struct{})
}

// Release lets the held deliveries through.
func (l *laggingCache) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hold != nil {
		close(l.release)
		l.hold = nil
	}
}

// Holding waits until a delivery is held back.
func (l *laggingCache) Holding(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	held := l.held
	l.mu.Unlock()
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the write the test holds back never reached the cache's informer")
	}
}

func (l *laggingCache) transform(obj any) (any, error) {
	l.mu.Lock()
	hold, release, held := l.hold, l.release, l.held
	if hold != nil && hold(obj) {
		l.hold = func(any) bool { return false } // one is enough: the rest queue behind it
		close(held)
	} else {
		release = nil
	}
	l.mu.Unlock()
	if release != nil {
		<-release
	}
	return obj, nil
}

// CaughtUp waits until the cache holds obj as the API server does (its resourceVersion).
func (l *laggingCache) CaughtUp(t *testing.T, obj client.Object) {
	t.Helper()
	live := obj.DeepCopyObject().(client.Object)
	cached := obj.DeepCopyObject().(client.Object)
	kubeapi.Eventually(t, fmt.Sprintf("the cache to catch up with %T %s", obj, obj.GetName()), 20*time.Second, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), live); err != nil {
			return err
		}
		if err := l.Get(context.Background(), client.ObjectKeyFromObject(obj), cached); err != nil {
			return err
		}
		if cached.GetResourceVersion() != live.GetResourceVersion() {
			return fmt.Errorf("cached at %s, the API server at %s", cached.GetResourceVersion(), live.GetResourceVersion())
		}
		return nil
	})
}
