// Command virtpod-agent is virtpod's node agent, run by a DaemonSet from the runner image so it
// probes exactly the binaries the runner will use. Every --interval it probes the node
// (pkg/nodeprobe), keeps the node's virtpod labels and its HypervisorNode up to date
// (pkg/nodeagent), and serves devices.virtpod.io/kvm to the kubelet (pkg/deviceplugin).
// `virtpod-agent probe` prints one probe as JSON and exits.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/deviceplugin"
	"github.com/virtpod/virtpod/pkg/nodeagent"
	"github.com/virtpod/virtpod/pkg/nodeprobe"
)

// version is set with -ldflags -X main.version=...; "dev" otherwise.
var version = "dev"

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

type options struct {
	probe          nodeprobe.Options
	nodeName       string
	kubeconfig     string
	interval       time.Duration
	plugin         deviceplugin.Options
	noDevicePlugin bool
}

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "virtpod-agent:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	var o options
	root := &cobra.Command{
		Use:           "virtpod-agent",
		Short:         "Probe this node for KVM, emulation and hypervisors; label it, publish its HypervisorNode, serve devices.virtpod.io/kvm",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE:          func(*cobra.Command, []string) error { return run(o) },
	}
	root.CompletionOptions.DisableDefaultCmd = true
	pf := root.PersistentFlags()
	pf.StringVar(&o.probe.KVMDevice, "kvm-device", deviceplugin.DefaultDevice, "KVM device node to probe (in the agent's pod: the host's /dev mounted elsewhere)")
	pf.DurationVar(&o.probe.KVMTimeout, "kvm-timeout", 2*time.Second, "how long the tiny KVM guest may take")
	pf.StringVar(&o.probe.QEMUBinary, "qemu-binary", envOr("VIRTPOD_QEMU_BINARY", nodeprobe.DefaultQEMUBinary), "qemu-system-x86_64 as the runner uses it (env VIRTPOD_QEMU_BINARY)")
	pf.StringVar(&o.probe.QEMUImgBinary, "qemu-img-binary", envOr("VIRTPOD_QEMU_IMG_BINARY", nodeprobe.DefaultQEMUImgBinary), "qemu-img (env VIRTPOD_QEMU_IMG_BINARY)")
	pf.StringVar(&o.probe.CloudHypervisorBinary, "cloud-hypervisor-binary", envOr("VIRTPOD_CLOUD_HYPERVISOR_BINARY", nodeprobe.DefaultCloudHypervisorBinary), "cloud-hypervisor (env VIRTPOD_CLOUD_HYPERVISOR_BINARY)")
	pf.StringVar(&o.probe.QEMUModuleDir, "qemu-module-dir", nodeprobe.DefaultQEMUModuleDir, "QEMU's module directory, where the TCG module lives")
	pf.DurationVar(&o.probe.CommandTimeout, "command-timeout", nodeprobe.DefaultCommandTimeout, "timeout of each hypervisor `--version`")

	f := root.Flags()
	f.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (env NODE_NAME, from the downward API's spec.nodeName)")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: the pod's service account)")
	f.DurationVar(&o.interval, "interval", 30*time.Second, "how often to probe and write the heartbeat")
	f.StringVar(&o.plugin.Dir, "device-plugin-dir", deviceplugin.DefaultDir, "the kubelet's device-plugin directory (host path mounted into the pod)")
	f.StringVar(&o.plugin.Device, "kvm-host-device", deviceplugin.DefaultDevice, "the node's KVM device, handed to pods at the same path")
	f.IntVar(&o.plugin.Count, "kvm-devices", deviceplugin.DefaultCount, "how many devices.virtpod.io/kvm to advertise: how many KVM VMs the node may run at once")
	f.BoolVar(&o.noDevicePlugin, "no-device-plugin", false, "do not serve the device plugin")

	root.AddCommand(&cobra.Command{
		Use:   "probe",
		Short: "Probe this node once and print the HypervisorNode status as JSON",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			o.probe.AgentVersion = version
			st := nodeprobe.Probe(context.Background(), o.probe)
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		},
	})
	return root
}

func run(o options) error {
	if o.nodeName == "" {
		return errors.New("node name unknown: set NODE_NAME from the downward API (fieldRef spec.nodeName) or pass --node-name")
	}
	if o.interval < time.Second {
		return fmt.Errorf("--interval %v is too short (at least 1s)", o.interval)
	}
	zc := zap.NewProductionConfig()
	zc.Sampling = nil
	log, err := zc.Build()
	if err != nil {
		return fmt.Errorf("logger: %w", err)
	}
	defer log.Sync() //nolint:errcheck
	log = log.With(zap.String("node", o.nodeName))

	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := vmv1.AddToScheme(scheme); err != nil {
		return err
	}
	kube, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	o.probe.AgentVersion = version
	o.plugin.Log = log.Named("deviceplugin")
	plugin := deviceplugin.New(o.plugin)
	errc := make(chan error, 1)
	if !o.noDevicePlugin {
		go func() { errc <- plugin.Run(ctx) }()
	}
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		nodeagent.Loop(ctx, o.interval, func(ctx context.Context) vmv1.HypervisorNodeStatus { return nodeprobe.Probe(ctx, o.probe) },
			plugin.SetHealthy, &nodeagent.Publisher{Client: kube, Node: o.nodeName}, log)
	}()
	log.Info("virtpod-agent started", zap.String("version", version), zap.Duration("interval", o.interval))
	select {
	case err := <-errc:
		stop()
		<-loopDone
		if err != nil {
			return fmt.Errorf("device plugin: %w", err)
		}
	case <-loopDone:
	}
	log.Info("virtpod-agent stopped")
	return nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no --kubeconfig and not in a pod: %w", err)
	}
	return cfg, nil
}
