package podcontrol

import (
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Agent is what each of the node agent's executors acts with. Client reads and patches pods;
// Kube reads VirtualMachines and their migrations uncached, so an executor acts only for a pod
// the controller's objects name (Authorize); Node is the agent's node; ControlDir is where the
// agent sees the node's vmv1.HostControlDir and PodResources the kubelet's pod-resources socket.
type Agent struct {
	Client       kubernetes.Interface
	Kube         client.Reader
	Node         string
	ControlDir   string
	PodResources string
	Log          *zap.Logger
}

// Named is a with its log named for one executor.
func (a Agent) Named(name string) Agent {
	a.Log = a.Log.Named(name)
	return a
}
