package e2e

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/bootcount"
)

// nsTests maps each test namespace to the test that made it, for the boot count.
var nsTests sync.Map

// countBoots counts, for make test's timing report, every runner pod whose runner container
// started, by the test whose namespace holds it: a started runner (and each restart of its
// container) is a booted guest, or for a migration target an incoming one. It runs until stop
// is closed.
func countBoots(stop <-chan struct{}) {
	f := informers.NewSharedInformerFactoryWithOptions(kubeset, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = vmv1.LabelManagedBy + "=" + vmv1.ManagedBy
	}))
	var mu sync.Mutex
	counted := map[types.UID]int{} // boots counted per pod
	started := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		boots := runnerBoots(pod)
		mu.Lock()
		add := boots - counted[pod.UID]
		if add > 0 {
			counted[pod.UID] = boots
		}
		mu.Unlock()
		if add <= 0 {
			return
		}
		test := fmt.Sprintf("namespace %s", pod.Namespace)
		if v, ok := nsTests.Load(pod.Namespace); ok {
			test = v.(string)
		}
		kind := "runner pods"
		if pod.Labels[vmv1.LabelMigrationRole] == vmv1.MigrationRoleTarget {
			kind = "migration targets"
		}
		for range add {
			bootcount.Add(test, kind)
		}
	}
	_, _ = f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    started,
		UpdateFunc: func(_, obj any) { started(obj) },
	})
	f.Start(stop)
}

// runnerBoots is how many times the pod's runner container has started.
func runnerBoots(pod *corev1.Pod) int {
	for _, c := range pod.Status.ContainerStatuses {
		if c.Name != vmv1.RunnerContainer {
			continue
		}
		n := int(c.RestartCount)
		if c.State.Running != nil || c.State.Terminated != nil {
			n++
		}
		return n
	}
	return 0
}
