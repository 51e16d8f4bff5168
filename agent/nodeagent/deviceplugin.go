package nodeagent

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/virtpod/virtpod/agent/deviceplugin"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// PluginOptions are the device plugin's settings, its command's flags.
type PluginOptions struct {
	Dir         string
	Device      string // the node's KVM device, handed to pods at the same path
	HostDevice  string // where this container sees the node's KVM device
	Count       int
	HealthEvery time.Duration
	ControlDir  string // the node's vmv1.HostControlDir, mounted at the same path
	Controls    int
}

// RunDevicePlugin serves the three resources until ctx ends or one fails: kvm-probe always
// healthy with /dev/kvm allocated where the node has one; kvm healthy while runner/kvm reads
// KVM as usable from the node's HypervisorNode (Usable, and a heartbeat younger than
// vmv1.ReportStaleAfter); control always healthy.
func RunDevicePlugin(ctx context.Context, o Options) error {
	po := o.Plugin
	kube, err := apiClient(o)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	plog := o.Log.Named("deviceplugin")
	probe := deviceplugin.New(deviceplugin.Options{Dir: po.Dir, Socket: deviceplugin.ProbeSocket, ResourceName: string(vmv1.ResourceKVMProbe),
		Count: 1, IDPrefix: "kvm-probe", Device: po.Device, CheckPath: po.HostDevice, Log: plog})
	probe.SetHealthy(true)
	kvmPlugin := deviceplugin.New(deviceplugin.Options{Dir: po.Dir, Count: po.Count, Device: po.Device, CheckPath: po.HostDevice,
		Healthy: kvmUsable(ctx, kube, o.NodeName, plog), HealthPoll: po.HealthEvery, Log: plog})
	control := deviceplugin.New(deviceplugin.ControlOptions(deviceplugin.Options{Dir: po.Dir, Log: plog}, po.ControlDir, po.ControlDir, po.Controls))
	control.SetHealthy(true)
	o.Log.Info("virtpod-agent device-plugin started", zap.String("version", o.Version))
	plugins := []*deviceplugin.Plugin{probe, kvmPlugin, control}
	errc := make(chan error, len(plugins))
	for _, p := range plugins {
		go func() { errc <- p.Run(ctx) }()
	}
	var first error
	for range plugins {
		if err := <-errc; err != nil && first == nil {
			first = fmt.Errorf("device plugin: %w", err)
			stop()
		}
	}
	o.Log.Info("virtpod-agent device-plugin stopped")
	return first
}

// kvmUsable is the kvm resource's health: whether node's HypervisorNode reads KVM as usable,
// logged when that changes.
func kvmUsable(ctx context.Context, kube client.Reader, node string, log *zap.Logger) func() bool {
	var last *bool
	return func() bool {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		hn := &vmv1.HypervisorNode{}
		ok, why := false, ""
		if err := kube.Get(ctx, client.ObjectKey{Name: node}, hn); err != nil {
			why = "reading the HypervisorNode: " + err.Error()
		} else {
			ok, why = hn.Status.KVMUsableAt(time.Now())
		}
		if last == nil || *last != ok {
			log.Info(string(vmv1.ResourceKVM)+" health", zap.Bool("healthy", ok), zap.String("reason", why))
			last = &ok
		}
		return ok
	}
}
