// Command virtpod-agent is virtpod's node agent (agent/nodeagent), run by a DaemonSet from the
// runner image so it probes exactly the binaries the runner will use. `virtpod-agent
// device-plugin` (its own DaemonSet) serves the kvm-probe, kvm and control devices to the
// kubelet (agent/deviceplugin); `virtpod-agent probe` prints one probe as JSON and exits.
package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/virtpod/virtpod/agent/deviceplugin"
	"github.com/virtpod/virtpod/agent/migration"
	"github.com/virtpod/virtpod/agent/nodeagent"
	"github.com/virtpod/virtpod/agent/nodereport"
	"github.com/virtpod/virtpod/agent/podcontrol"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/runner/kvm"
)

// version is set with -ldflags -X main.version=...; "dev" otherwise.
var version = "dev"

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "virtpod-agent:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	o := nodeagent.Options{Version: version}
	root := &cobra.Command{Use: "virtpod-agent", Short: "Probe this node for KVM, emulation and hypervisors; label it and publish its HypervisorNode",
		SilenceUsage: true, SilenceErrors: true, Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return run(o, nodeagent.Run) }}
	root.CompletionOptions.DisableDefaultCmd = true
	pf, bins := root.PersistentFlags(), binaries.FromEnv()
	pf.StringVar(&o.Probe.KVMDevice, "kvm-device", kvm.DefaultDevice, "KVM device node to probe (in the agent's pod: the one devices.virtpod.io/kvm-probe injected)")
	pf.DurationVar(&o.Probe.KVMTimeout, "kvm-timeout", kvm.DefaultTimeout, "how long the tiny KVM guest may take")
	pf.StringVar(&o.Probe.QEMUBinary, "qemu-binary", bins.QEMU, binaries.QEMUName+" as the runner uses it (env "+binaries.EnvQEMU+")")
	pf.StringVar(&o.Probe.QEMUImgBinary, "qemu-img-binary", bins.QEMUImg, binaries.QEMUImgName+" (env "+binaries.EnvQEMUImg+")")
	pf.StringVar(&o.Probe.CloudHypervisorBinary, "cloud-hypervisor-binary", bins.CloudHypervisor, binaries.CloudHypervisorName+" (env "+binaries.EnvCloudHypervisor+")")
	pf.StringVar(&o.Probe.QEMUModuleDir, "qemu-module-dir", binaries.QEMUModuleDir, "QEMU's module directory, where the TCG module lives")
	pf.DurationVar(&o.Probe.CommandTimeout, "command-timeout", nodereport.DefaultCommandTimeout, "timeout of each hypervisor `--version`")
	pf.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (env NODE_NAME, from the downward API's spec.nodeName)")
	pf.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: the pod's service account)")
	f := root.Flags()
	f.DurationVar(&o.Interval, "interval", 30*time.Second, "how often to probe and write the heartbeat")
	f.BoolVar(&o.Suspend, "suspend", true, "save the guest of each runner pod the controller asks to suspend (vm.virtpod.io/suspend) through the runner's control socket")
	f.BoolVar(&o.GuestFacts, "guest-facts", true, "carry what each guest's qemu-guest-agent says (the runner's control socket) into its runner pod's guest-facts annotation")
	f.BoolVar(&o.Resize, "resize", true, "carry out live resizes of the runner pods on this node (the controller's desired sizes) through their control sockets")
	f.StringVar(&o.ControlDir, "control-dir", vmv1.HostControlDir, "where this container sees the node's runner control directories (devices.virtpod.io/control)")
	f.StringVar(&o.PodResources, "pod-resources-socket", podcontrol.DefaultPodResourcesSocket, "the kubelet's pod-resources socket: which control device is which pod's")
	f.BoolVar(&o.Migrate, "migration", true, "carry live migrations' streams between this node's runner pods and other nodes' agents (mutual TLS)")
	f.StringVar(&o.MigrationListen, "migration-listen", fmt.Sprintf(":%d", migration.DefaultPort), "where to take migration streams from other nodes' agents")
	f.StringVar(&o.PodIP, "pod-ip", os.Getenv("POD_IP"), "this agent pod's IP, where other agents send streams (env POD_IP, from the downward API's status.podIP)")
	f.StringVar(&o.PprofAddr, "pprof-addr", "", "where to serve Go's profiles (/debug/pprof/) for leak hunts such as make soak-node (empty: nowhere; they show the agent's internals)")
	f.StringVar(&o.MetricsAddr, "metrics-addr", ":9441", "where to serve /metrics: the runner pods' spoof guard counters, each running VM's counters (asked of its runner at each scrape) and the agent's own Go and process figures (empty: nowhere, and no VM is asked)")
	f.StringVar(&o.KernelCache, "kernel-cache-dir", "", "where to keep the PVH kernels unpacked from the VMs' bzImages, so QEMU holds no copy of them (empty: unpack none; each VM's QEMU then copies its bzImage)")
	f.StringVar(&o.Namespace, "namespace", cmp.Or(os.Getenv("POD_NAMESPACE"), "virtpod-system"), "the agents' namespace, which holds Secret "+migration.SecretName+" (env POD_NAMESPACE)")
	dp := &cobra.Command{Use: "device-plugin", Short: "Serve devices.virtpod.io/kvm-probe (for the agent) and devices.virtpod.io/kvm (healthy while the node's HypervisorNode says KVM Usable)",
		Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return run(o, nodeagent.RunDevicePlugin) }}
	f = dp.Flags()
	f.StringVar(&o.Plugin.Dir, "device-plugin-dir", deviceplugin.DefaultDir, "the kubelet's device-plugin directory (host path mounted into the pod)")
	f.StringVar(&o.Plugin.Device, "kvm-host-device", kvm.DefaultDevice, "the node's KVM device, handed to pods at the same path")
	f.StringVar(&o.Plugin.HostDevice, "kvm-check-path", "/host/dev/kvm", "where this container sees the node's KVM device (the host's /dev mounted read-only); no device is handed out while it is missing")
	f.IntVar(&o.Plugin.Count, "kvm-devices", deviceplugin.DefaultCount, "how many devices.virtpod.io/kvm to advertise: how many KVM VMs the node may run at once")
	f.DurationVar(&o.Plugin.HealthEvery, "health-interval", 10*time.Second, "how often to read the node's HypervisorNode")
	f.StringVar(&o.Plugin.ControlDir, "control-dir", vmv1.HostControlDir, "the node's directory of runner control directories (devices.virtpod.io/control), mounted at the same path")
	f.IntVar(&o.Plugin.Controls, "control-devices", deviceplugin.DefaultControlCount, "how many devices.virtpod.io/control to advertise: every runner pod takes one")
	root.AddCommand(dp, &cobra.Command{Use: nodeagent.UnpackKernelCommand, Hidden: true, Args: cobra.NoArgs,
		Short: "The agent's own child process: unpack the bzImage at descriptor 3 into the file at descriptor 4 (pkg/kernel/kernelcache)",
		RunE:  func(*cobra.Command, []string) error { return nodeagent.UnpackKernel() }},
		&cobra.Command{Use: "probe", Short: "Probe this node once and print the HypervisorNode status as JSON", Args: cobra.NoArgs,
			RunE: func(*cobra.Command, []string) error { return nodeagent.Probe(context.Background(), os.Stdout, o) }})
	return root
}

// run makes the logger, named for the node, and runs work until SIGTERM or SIGINT.
func run(o nodeagent.Options, work func(context.Context, nodeagent.Options) error) error {
	zc := zap.NewProductionConfig()
	zc.Sampling = nil
	log, err := zc.Build()
	if err != nil {
		return fmt.Errorf("logger: %w", err)
	}
	o.Log = log.With(zap.String("node", o.NodeName))
	defer o.Log.Sync() //nolint:errcheck
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return work(ctx, o)
}
