// Command virtpod-agent is virtpod's node agent, run by a DaemonSet from the runner image so it
// probes exactly the binaries the runner will use. Every --interval it probes the node and
// keeps the node's virtpod labels and its HypervisorNode up to date (agent/nodereport). It opens
// /dev/kvm as its pod got it from devices.virtpod.io/kvm-probe. It builds each runner pod's
// guest network in the pod's namespace, which the runner, holding no capability, cannot
// (agent/network), carries out live resizes of the node's runner pods (agent/resize)
// and their suspends (agent/suspend), reports their guests' starts (agent/start),
// carries what their guests' agents say (agent/facts) and their live migrations' streams to and from other nodes' agents
// (agent/migration).
// `virtpod-agent device-plugin` (its own DaemonSet) serves devices.virtpod.io/kvm-probe,
// devices.virtpod.io/kvm and devices.virtpod.io/control to the kubelet (agent/deviceplugin),
// kvm healthy while runner/kvm reads KVM as usable from the node's HypervisorNode.
// `virtpod-agent probe` prints one probe as JSON and exits.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/virtpod/virtpod/agent/deviceplugin"
	"github.com/virtpod/virtpod/agent/facts"
	"github.com/virtpod/virtpod/agent/migration"
	"github.com/virtpod/virtpod/agent/network"
	"github.com/virtpod/virtpod/agent/nodereport"
	"github.com/virtpod/virtpod/agent/podcontrol"
	"github.com/virtpod/virtpod/agent/resize"
	"github.com/virtpod/virtpod/agent/start"
	"github.com/virtpod/virtpod/agent/suspend"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/dropcaps"
	"github.com/virtpod/virtpod/pkg/kernel/kernelcache"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/runner/kvm"
)

// version is set with -ldflags -X main.version=...; "dev" otherwise.
var version = "dev"

type options struct {
	probe      nodereport.Options
	nodeName   string
	kubeconfig string
	interval   time.Duration
	// Live resize (agent/resize), the guests' agents (agent/facts) and suspends
	// (agent/suspend): where the
	// agent sees the node's control directories and the kubelet's pod-resources socket;
	// resize, guestFacts and suspend false turn their executors off.
	resize       bool
	guestFacts   bool
	suspend      bool
	controlDir   string
	podResources string
	// Live migration (agent/migration): the receiver's address, this pod's IP and
	// namespace (its Secret's); migrate false turns it off.
	migrate         bool
	migrationListen string
	podIP           string
	namespace       string
	// metricsAddr serves /metrics (the spoof guards' counters); "" serves none.
	metricsAddr string
	// pprofAddr serves Go's profiles (/debug/pprof/); "" serves none.
	pprofAddr string
	// kernelCache is where the PVH kernels unpacked from the VMs' bzImages are kept
	// (pkg/kernel/kernelcache); "" unpacks none.
	kernelCache string
}

type pluginOptions struct {
	dir         string
	device      string // the node's KVM device, handed to pods at the same path
	hostDevice  string // where this container sees the node's KVM device
	count       int
	healthEvery time.Duration
	controlDir  string // the node's vmv1.HostControlDir, mounted at the same path
	controls    int
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
		Short:         "Probe this node for KVM, emulation and hypervisors; label it and publish its HypervisorNode",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE:          func(*cobra.Command, []string) error { return run(o) },
	}
	root.CompletionOptions.DisableDefaultCmd = true
	pf := root.PersistentFlags()
	bins := binaries.FromEnv()
	pf.StringVar(&o.probe.KVMDevice, "kvm-device", kvm.DefaultDevice, "KVM device node to probe (in the agent's pod: the one devices.virtpod.io/kvm-probe injected)")
	pf.DurationVar(&o.probe.KVMTimeout, "kvm-timeout", kvm.DefaultTimeout, "how long the tiny KVM guest may take")
	pf.StringVar(&o.probe.QEMUBinary, "qemu-binary", bins.QEMU, binaries.QEMUName+" as the runner uses it (env "+binaries.EnvQEMU+")")
	pf.StringVar(&o.probe.QEMUImgBinary, "qemu-img-binary", bins.QEMUImg, binaries.QEMUImgName+" (env "+binaries.EnvQEMUImg+")")
	pf.StringVar(&o.probe.CloudHypervisorBinary, "cloud-hypervisor-binary", bins.CloudHypervisor, binaries.CloudHypervisorName+" (env "+binaries.EnvCloudHypervisor+")")
	pf.StringVar(&o.probe.QEMUModuleDir, "qemu-module-dir", binaries.QEMUModuleDir, "QEMU's module directory, where the TCG module lives")
	pf.DurationVar(&o.probe.CommandTimeout, "command-timeout", nodereport.DefaultCommandTimeout, "timeout of each hypervisor `--version`")

	pf.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (env NODE_NAME, from the downward API's spec.nodeName)")
	pf.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: the pod's service account)")
	root.Flags().DurationVar(&o.interval, "interval", 30*time.Second, "how often to probe and write the heartbeat")
	root.Flags().BoolVar(&o.suspend, "suspend", true, "save the guest of each runner pod the controller asks to suspend (vm.virtpod.io/suspend) through the runner's control socket")
	root.Flags().BoolVar(&o.guestFacts, "guest-facts", true, "carry what each guest's qemu-guest-agent says (the runner's control socket) into its runner pod's guest-facts annotation")
	root.Flags().BoolVar(&o.resize, "resize", true, "carry out live resizes of the runner pods on this node (the controller's desired sizes) through their control sockets")
	root.Flags().StringVar(&o.controlDir, "control-dir", vmv1.HostControlDir, "where this container sees the node's runner control directories (devices.virtpod.io/control)")
	root.Flags().StringVar(&o.podResources, "pod-resources-socket", podcontrol.DefaultPodResourcesSocket, "the kubelet's pod-resources socket: which control device is which pod's")
	root.Flags().BoolVar(&o.migrate, "migration", true, "carry live migrations' streams between this node's runner pods and other nodes' agents (mutual TLS)")
	root.Flags().StringVar(&o.migrationListen, "migration-listen", fmt.Sprintf(":%d", migration.DefaultPort), "where to take migration streams from other nodes' agents")
	root.Flags().StringVar(&o.podIP, "pod-ip", os.Getenv("POD_IP"), "this agent pod's IP, where other agents send streams (env POD_IP, from the downward API's status.podIP)")
	root.Flags().StringVar(&o.pprofAddr, "pprof-addr", "", "where to serve Go's profiles (/debug/pprof/) for leak hunts such as make soak-node (empty: nowhere; they show the agent's internals)")
	root.Flags().StringVar(&o.metricsAddr, "metrics-addr", ":9441", "where to serve /metrics: the runner pods' spoof guard counters and the agent's own Go and process figures (empty: nowhere)")
	root.Flags().StringVar(&o.kernelCache, "kernel-cache-dir", "", "where to keep the PVH kernels unpacked from the VMs' bzImages, so QEMU holds no copy of them (empty: unpack none; each VM's QEMU then copies its bzImage)")
	root.Flags().StringVar(&o.namespace, "namespace", envOr("POD_NAMESPACE", "virtpod-system"), "the agents' namespace, which holds Secret "+migration.SecretName+" (env POD_NAMESPACE)")

	var po pluginOptions
	dp := &cobra.Command{
		Use:   "device-plugin",
		Short: "Serve devices.virtpod.io/kvm-probe (for the agent) and devices.virtpod.io/kvm (healthy while the node's HypervisorNode says KVM Usable)",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return runDevicePlugin(o, po) },
	}
	f := dp.Flags()
	f.StringVar(&po.dir, "device-plugin-dir", deviceplugin.DefaultDir, "the kubelet's device-plugin directory (host path mounted into the pod)")
	f.StringVar(&po.device, "kvm-host-device", kvm.DefaultDevice, "the node's KVM device, handed to pods at the same path")
	f.StringVar(&po.hostDevice, "kvm-check-path", "/host/dev/kvm", "where this container sees the node's KVM device (the host's /dev mounted read-only); no device is handed out while it is missing")
	f.IntVar(&po.count, "kvm-devices", deviceplugin.DefaultCount, "how many devices.virtpod.io/kvm to advertise: how many KVM VMs the node may run at once")
	f.DurationVar(&po.healthEvery, "health-interval", 10*time.Second, "how often to read the node's HypervisorNode")
	f.StringVar(&po.controlDir, "control-dir", vmv1.HostControlDir, "the node's directory of runner control directories (devices.virtpod.io/control), mounted at the same path")
	f.IntVar(&po.controls, "control-devices", deviceplugin.DefaultControlCount, "how many devices.virtpod.io/control to advertise: every runner pod takes one")
	root.AddCommand(dp)

	root.AddCommand(&cobra.Command{
		Use:    "unpack-kernel",
		Short:  "The agent's own child process: unpack the bzImage at descriptor 3 into the file at descriptor 4 (pkg/kernel/kernelcache)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE:   func(*cobra.Command, []string) error { return unpackKernel() },
	})
	root.AddCommand(&cobra.Command{
		Use:   "probe",
		Short: "Probe this node once and print the HypervisorNode status as JSON",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			o.probe.AgentVersion = version
			st := nodereport.Probe(context.Background(), o.probe)
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		},
	})
	return root
}

// unpackKernel is the child process of the agent's kernel store. The bzImage is a pod's, so it
// first gives up the agent's capabilities (re-executing itself through dropcaps, which keeps
// descriptors 3 and 4), then unpacks as a process the OOM killer takes first.
func unpackKernel() error {
	held, err := dropcaps.Held()
	if err != nil {
		return err
	}
	if held {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		return dropcaps.Exec([]string{exe, "unpack-kernel"}) // returns only on failure
	}
	os.Exit(kernelcache.UnpackerMain())
	return nil
}

// executor is one of the agent's pod executors: whether it is on, whether the agent stops
// without it, and how it runs.
type executor struct {
	name  string
	on    bool
	vital bool
	run   func(context.Context) error
}

// executors are the agent's pod executors, each on its own log. The pod networks and live
// migration are vital: every runner waits for its network before its guest starts, and without
// the migration stream no VM can leave or reach the node, so the agent stops (and its pod
// restarts) rather than run on half-able. Without the guest-start report the VMs still reach
// Running, by the kubelet's startup probe, up to a second later.
func executors(o options, a podcontrol.Agent, nx *network.Executor) []executor {
	return []executor{
		{"pod networks", true, true, nx.Run},
		{"guest start", true, false, (&start.Executor{Agent: a.Named("guest-start")}).Run},
		{"guest facts", o.guestFacts, false, (&facts.Executor{Agent: a.Named("guest-facts")}).Run},
		{"suspend", o.suspend, false, (&suspend.Executor{Agent: a.Named("suspend")}).Run},
		{"resize", o.resize, false, (&resize.Executor{Agent: a.Named("resize")}).Run},
		{"live migration", o.migrate, true, (&migration.Executor{Agent: a.Named("migration"), Namespace: o.namespace, PodIP: o.podIP, Listen: o.migrationListen}).Run},
	}
}

func run(o options) error {
	if o.interval < time.Second {
		return fmt.Errorf("--interval %v is too short (at least 1s)", o.interval)
	}
	log, kube, err := setup(o)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	o.probe.AgentVersion = version
	log.Info("virtpod-agent started", zap.String("version", version), zap.Duration("interval", o.interval))
	// The first executor that cannot go on ends the agent; a second one's error is logged.
	fatal := make(chan error, 1)
	quit := func(err error) {
		select {
		case fatal <- err:
		default:
			log.Error("executor stopped", zap.Error(err))
		}
		stop()
	}
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	nodeAgent := podcontrol.Agent{Client: cs, Kube: kube, Node: o.nodeName, ControlDir: o.controlDir, PodResources: o.podResources, Log: log}
	nx := &network.Executor{Agent: nodeAgent.Named("network")}
	if o.kernelCache != "" {
		kc, err := kernelcache.New(o.kernelCache, 0, 0)
		if err != nil {
			return err
		}
		// The bzImages are the pods', so hostile: each is unpacked by a child process, which the
		// OOM killer takes before the agent.
		kc.Unpacker = func() *exec.Cmd { return exec.Command("/proc/self/exe", "unpack-kernel") }
		nx.Kernels = kc
	}
	for _, x := range executors(o, nodeAgent, nx) {
		if !x.on {
			continue
		}
		go func() {
			if err := x.run(ctx); err != nil && x.vital {
				quit(fmt.Errorf("%s: %w", x.name, err))
			} else if err != nil {
				log.Error(x.name+" executor stopped", zap.Error(err))
			}
		}()
	}
	if o.metricsAddr != "" {
		reg := prometheus.NewRegistry()
		// The Go runtime's and the process's own figures (heap, goroutines, open fds): what
		// tells a leak in a long-running agent (make soak-node reads them).
		reg.MustRegister(nx, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		defer serveHTTP(o.metricsAddr, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), "metrics endpoint", log)()
	}
	if o.pprofAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		defer serveHTTP(o.pprofAddr, mux, "profiling endpoint", log)()
	}
	// The device plugin runs apart (virtpod-agent device-plugin) and follows the HypervisorNode.
	nodereport.Loop(ctx, o.interval, func(ctx context.Context) vmv1.HypervisorNodeStatus { return nodereport.Probe(ctx, o.probe) },
		&nodereport.Publisher{Client: kube, Node: o.nodeName}, log)
	select {
	case err := <-fatal:
		return err
	default:
	}
	log.Info("virtpod-agent stopped")
	return nil
}

// runDevicePlugin serves both resources until SIGTERM: kvm-probe always healthy with /dev/kvm
// allocated where the node has one; kvm healthy while runner/kvm reads KVM as usable from the
// node's HypervisorNode (Usable, and a heartbeat younger than vmv1.ReportStaleAfter).
func runDevicePlugin(o options, po pluginOptions) error {
	log, kube, err := setup(o)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	plog := log.Named("deviceplugin")
	var lastUsable *bool
	usable := func() bool {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		hn := &vmv1.HypervisorNode{}
		ok, why := false, ""
		if err := kube.Get(ctx, client.ObjectKey{Name: o.nodeName}, hn); err != nil {
			why = "reading the HypervisorNode: " + err.Error()
		} else {
			ok, why = hn.Status.KVMUsableAt(time.Now())
		}
		if lastUsable == nil || *lastUsable != ok {
			plog.Info(string(vmv1.ResourceKVM)+" health", zap.Bool("healthy", ok), zap.String("reason", why))
			lastUsable = &ok
		}
		return ok
	}
	probe := deviceplugin.New(deviceplugin.Options{Dir: po.dir, Socket: deviceplugin.ProbeSocket, ResourceName: string(vmv1.ResourceKVMProbe),
		Count: 1, IDPrefix: "kvm-probe", Device: po.device, CheckPath: po.hostDevice, Log: plog})
	probe.SetHealthy(true)
	kvmPlugin := deviceplugin.New(deviceplugin.Options{Dir: po.dir, Count: po.count, Device: po.device, CheckPath: po.hostDevice,
		Healthy: usable, HealthPoll: po.healthEvery, Log: plog})
	control := deviceplugin.New(deviceplugin.ControlOptions(deviceplugin.Options{Dir: po.dir, Log: plog}, po.controlDir, po.controlDir, po.controls))
	control.SetHealthy(true)
	log.Info("virtpod-agent device-plugin started", zap.String("version", version))
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
	log.Info("virtpod-agent device-plugin stopped")
	return first
}

// setup checks the node's name and makes the logger (with that name) and the API client.
func setup(o options) (*zap.Logger, client.Client, error) {
	if o.nodeName == "" {
		return nil, nil, errors.New("node name unknown: set NODE_NAME from the downward API (fieldRef spec.nodeName) or pass --node-name")
	}
	zc := zap.NewProductionConfig()
	zc.Sampling = nil
	log, err := zc.Build()
	if err != nil {
		return nil, nil, fmt.Errorf("logger: %w", err)
	}
	log = log.With(zap.String("node", o.nodeName))

	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	// A node's runners all wait on the agent's authorization when many start at once (a
	// node's VMs after it reboots): client-go's default of 5 requests a second would queue them.
	cfg.QPS, cfg.Burst = 20, 40
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	if err := vmv1.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	kube, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}

	return log, kube, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
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

// serveHTTP serves h on addr until the returned stop is called, logging a server that fails.
func serveHTTP(addr string, h http.Handler, what string, log *zap.Logger) (stop func()) {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(what+" stopped", zap.String("addr", addr), zap.Error(err))
		}
	}()
	return func() { _ = srv.Close() }
}
