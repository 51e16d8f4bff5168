package podcontrol

import (
	"context"
	"fmt"
	"time"

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

// Loop is how an executor follows its node's runner pods: its name (in its log and errors), how
// many pods it handles at once, the longest back-off of a pod whose handling keeps failing,
// and the log message of a failure.
type Loop struct {
	Name     string
	Workers  int
	MaxDelay time.Duration
	Retrying string
}

// Serve is what every pod executor shares: it checks the agent's settings, watches the node's
// pods, and runs the handler that handle gives for the watch (which it may keep, to list or
// requeue pods) on each pod as it changes, until ctx ends. Each executor keeps only its own
// defaults and its handler.
func (a *Agent) Serve(ctx context.Context, l Loop, handle func(*NodePods) Handler) error {
	if a.Node == "" || a.Kube == nil {
		return fmt.Errorf("%s executor: no node name, or no client to read VirtualMachines", l.Name)
	}
	if a.Log == nil {
		a.Log = zap.NewNop()
	}
	w, err := WatchNode(ctx, a.Client, a.Node, WatchOptions{MaxDelay: l.MaxDelay, Retrying: l.Retrying, Log: a.Log})
	if err != nil {
		return err
	}
	defer w.Shutdown()
	a.Log.Info(l.Name + " executor started")
	w.Run(ctx, max(l.Workers, 1), handle(w))
	return nil
}
