// Package nodeagent puts the node agent together from its parts and runs it: the node's report
// every interval (agent/nodereport), the pod executors from a table (network, start, facts,
// suspend, resize, migration), the kernel store, the metrics and profiling endpoints; and, as
// its own process, the device plugin (agent/deviceplugin). cmd/virtpod-agent parses the flags
// into Options and calls Run or RunDevicePlugin.
package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/agent/network"
	"github.com/virtpod/virtpod/agent/nodereport"
	"github.com/virtpod/virtpod/agent/podcontrol"
	"github.com/virtpod/virtpod/agent/vmstats"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Options are the node agent's settings, its command's flags; the device plugin shares the
// node's name and the API server's.
type Options struct {
	Probe      nodereport.Options
	NodeName   string
	Kubeconfig string
	Interval   time.Duration
	// Live resize (agent/resize), the guests' agents (agent/facts) and suspends
	// (agent/suspend): where the agent sees the node's control directories and the kubelet's
	// pod-resources socket; Resize, GuestFacts and Suspend false turn their executors off.
	Resize       bool
	GuestFacts   bool
	Suspend      bool
	ControlDir   string
	PodResources string
	// Live migration (agent/migration): the receiver's address, this pod's IP and namespace
	// (its Secret's); Migrate false turns it off.
	Migrate         bool
	MigrationListen string
	PodIP           string
	Namespace       string
	// MetricsAddr serves /metrics (the spoof guards' counters, each running VM's counters);
	// "" serves none, and asks no runner for its VM's counters.
	MetricsAddr string
	// PprofAddr serves Go's profiles (/debug/pprof/); "" serves none.
	PprofAddr string
	// KernelCache is where the PVH kernels unpacked from the VMs' bzImages are kept
	// (pkg/kernel/kernelcache); "" unpacks none.
	KernelCache string
	// Plugin is the device plugin's (RunDevicePlugin).
	Plugin PluginOptions
	// Version is the agent's, in its report and log.
	Version string
	Log     *zap.Logger
}

// Run runs the node agent until ctx ends or a vital executor stops: the executors in the
// background, the node's report in the foreground.
func Run(ctx context.Context, o Options) error {
	if o.Interval < time.Second {
		return fmt.Errorf("--interval %v is too short (at least 1s)", o.Interval)
	}
	kube, err := apiClient(o)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	o.Probe.AgentVersion = o.Version
	o.Log.Info("virtpod-agent started", zap.String("version", o.Version), zap.Duration("interval", o.Interval))
	cs, err := clientset(o.Kubeconfig)
	if err != nil {
		return err
	}
	agent := podcontrol.Agent{Client: cs, Kube: kube, Node: o.NodeName, ControlDir: o.ControlDir, PodResources: o.PodResources, Log: o.Log}
	nx := &network.Executor{Agent: agent.Named("network")}
	if o.KernelCache != "" {
		if nx.Kernels, err = kernelCache(o.KernelCache); err != nil {
			return err
		}
	}
	vs := &vmstats.Executor{Agent: agent.Named("vm-stats")}
	fatal := runExecutors(ctx, stop, executors(o, agent, nx, vs), o.Log)
	if o.MetricsAddr != "" {
		defer serveHTTP(o.MetricsAddr, metrics(nx, vs), "metrics endpoint", o.Log)()
	}
	if o.PprofAddr != "" {
		defer serveHTTP(o.PprofAddr, profiles(), "profiling endpoint", o.Log)()
	}
	// The device plugin runs apart (RunDevicePlugin) and follows the HypervisorNode.
	nodereport.Loop(ctx, o.Interval, func(ctx context.Context) vmv1.HypervisorNodeStatus { return nodereport.Probe(ctx, o.Probe) },
		&nodereport.Publisher{Client: kube, Node: o.NodeName}, o.Log)
	select {
	case err := <-fatal:
		return err
	default:
	}
	o.Log.Info("virtpod-agent stopped")
	return nil
}

// Probe probes the node once and writes the HypervisorNode status to w as JSON.
func Probe(ctx context.Context, w io.Writer, o Options) error {
	o.Probe.AgentVersion = o.Version
	st := nodereport.Probe(ctx, o.Probe)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(st)
}
