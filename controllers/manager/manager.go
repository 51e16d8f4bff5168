// Package manager assembles virtpod's controller manager: the scheme, a cache that holds only
// virtpod's pods, and the controllers. The binary and the tests build it the same way.
package manager

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/virtpod/virtpod/apis/infrastructure/v1alpha1"
	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/clusterapi/virtpodcluster"
	"github.com/virtpod/virtpod/controllers/clusterapi/virtpodmachine"
	"github.com/virtpod/virtpod/controllers/clusterapi/virtpodmachinetemplate"
	"github.com/virtpod/virtpod/controllers/fleetmetrics"
	"github.com/virtpod/virtpod/controllers/imagemapwatch"
	"github.com/virtpod/virtpod/controllers/migration"
	"github.com/virtpod/virtpod/controllers/providerclass"
	"github.com/virtpod/virtpod/controllers/snapshot"
	vmctrl "github.com/virtpod/virtpod/controllers/vm"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// Options configure the manager.
type Options struct {
	Pod              podspec.Options
	Workers          int
	MetricsAddr      string // "0" disables the metrics server
	PprofAddr        string // Go's profiles (net/http/pprof); "" or "0": off
	HealthAddr       string // "" or "0" disables the probes
	LeaderElection   bool
	LeaderElectionNS string
	// Lease is the leader election's timing; zero fields keep client-go's 15 s / 10 s / 2 s.
	Lease           LeaseTiming
	MetricsRegistry prometheus.Registerer
	// Now is the controllers' clock; nil means time.Now. Tests move it to skip back-offs.
	Now func() time.Time
	// ImageMap names the image-map ConfigMap; empty leaves images as the VMs give them.
	ImageMap types.NamespacedName
	// ClusterAPI runs the Cluster API infrastructure provider's controllers (VirtPodCluster,
	// VirtPodMachine); Cluster API's CRDs must be installed.
	ClusterAPI bool
	// SecondInstance lets tests run a second manager in one process, as a racing replica.
	SecondInstance bool
	// Namespace is the controller's own, where readiness dry-runs a VirtualMachine
	// (VMCreatableCheck); empty: "default".
	Namespace string
}

// LeaseTiming is how the replicas share the leader lease: a leader renews it every RetryPeriod
// and gives up leading when it cannot within RenewDeadline; a standby takes a lease not renewed
// for Duration. A leader that dies holding the lease is replaced within Duration (plus a retry).
type LeaseTiming struct {
	Duration, RenewDeadline, RetryPeriod time.Duration
}

// optional is d, or nil (controller-runtime's default) when it is not positive.
func optional(d time.Duration) *time.Duration {
	if d <= 0 {
		return nil
	}
	return &d
}

// Scheme has the types the controllers use.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	for _, add := range []func(*runtime.Scheme) error{vmv1.AddToScheme, infrav1.AddToScheme, clusterv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// cacheOptions caches only what the controllers read: virtpod's runner pods, not every pod in
// the cluster, and of ConfigMaps only the image map.
func cacheOptions(imageMap types.NamespacedName) cache.Options {
	byObject := map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{vmv1.LabelManagedBy: vmv1.ManagedBy})},
		// Only the control-plane Services virtpod made.
		&corev1.Service{}: {Label: labels.SelectorFromSet(labels.Set{vmv1.LabelManagedBy: vmv1.ManagedBy})},
		// Only the budgets of LiveMigrate VMs.
		&policyv1.PodDisruptionBudget{}: {Label: labels.SelectorFromSet(labels.Set{vmv1.LabelManagedBy: vmv1.ManagedBy})},
	}
	if imageMap.Name != "" {
		byObject[&corev1.ConfigMap{}] = cache.ByObject{
			Namespaces: map[string]cache.Config{imageMap.Namespace: {}},
			Field:      fields.OneTermEqualSelector("metadata.name", imageMap.Name),
		}
	}
	return cache.Options{ByObject: byObject}
}

// New builds a manager with every controller registered.
func New(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	if o.Workers < 1 {
		o.Workers = 1
	}
	healthAddr := o.HealthAddr
	if healthAddr == "" {
		healthAddr = "0"
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  Scheme(),
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:  healthAddr,
		PprofBindAddress:        o.PprofAddr,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        "virtpod-controller.virtpod.io",
		LeaderElectionNamespace: o.LeaderElectionNS,
		// A replica stopped gracefully (a rollout, a drain) hands the lease over at once
		// instead of leaving the standby to wait out its duration; safe because the process
		// exits as soon as the manager returns.
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 optional(o.Lease.Duration),
		RenewDeadline:                 optional(o.Lease.RenewDeadline),
		RetryPeriod:                   optional(o.Lease.RetryPeriod),
		Cache:                         cacheOptions(o.ImageMap),
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if healthAddr != "0" {
		if err := addReadiness(mgr, o.Namespace); err != nil {
			return nil, err
		}
	}
	reg := o.MetricsRegistry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	// The fleet's gauges read the cache at scrape time (docs/metrics.md).
	if err := reg.Register(fleetmetrics.Collector{Reader: mgr.GetClient()}); err != nil {
		return nil, fmt.Errorf("registering the fleet metrics: %w", err)
	}
	var source *imagemapwatch.Source
	if o.ImageMap.Name != "" {
		source = &imagemapwatch.Source{Reader: mgr.GetClient(), Key: o.ImageMap}
		reporter := &imagemapwatch.Reporter{Source: source, Recorder: mgr.GetEventRecorder("virtpod-controller")}
		if err := reporter.SetupWithManager(mgr, o.SecondInstance); err != nil {
			return nil, fmt.Errorf("setting up the image map: %w", err)
		}
	}
	r := &vmctrl.Reconciler{
		ImageMap:  source,
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("virtpod-controller"),
		Options:   o.Pod,
		Metrics:   vmctrl.NewMetrics(reg),
		Now:       o.Now,
	}
	if err := r.SetupWithManager(mgr, o.Workers, o.SecondInstance); err != nil {
		return nil, fmt.Errorf("setting up the VirtualMachine controller: %w", err)
	}
	migrations := &migration.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("virtpod-controller"), Metrics: migration.NewMetrics(reg), Now: o.Now}
	if err := migrations.SetupWithManager(mgr, o.SecondInstance); err != nil {
		return nil, fmt.Errorf("setting up the VirtualMachineMigration controller: %w", err)
	}
	evacuator := &migration.Evacuator{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("virtpod-controller"), Now: o.Now}
	if err := evacuator.SetupWithManager(mgr, o.SecondInstance); err != nil {
		return nil, fmt.Errorf("setting up the evacuation controller: %w", err)
	}
	snapshots := &snapshot.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("virtpod-controller"), Now: o.Now, RunnerImage: o.Pod.RunnerImage, Metrics: snapshot.NewMetrics(reg)}
	if err := snapshots.SetupWithManager(mgr, o.SecondInstance); err != nil {
		return nil, fmt.Errorf("setting up the snapshot and restore controllers: %w", err)
	}
	classes := &providerclass.Reconciler{Client: mgr.GetClient(), Now: o.Now}
	if err := classes.SetupWithManager(mgr, o.SecondInstance); err != nil {
		return nil, fmt.Errorf("setting up the ProviderClass controller: %w", err)
	}
	if o.ClusterAPI {
		if err := setupClusterAPI(mgr, o); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

// addReadiness makes /readyz wait until VirtualMachines can be created (VMCreatableCheck). Its
// client reads uncached: the probe runs before the cache has started.
func addReadiness(mgr ctrl.Manager, namespace string) error {
	if namespace == "" {
		namespace = "default"
	}
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return fmt.Errorf("readiness client: %w", err)
	}
	check := &VMCreatableCheck{Client: c, Namespace: namespace, Log: mgr.GetLogger().WithName("readiness")}
	if err := mgr.AddReadyzCheck("vm-creatable", check.Check); err != nil {
		return fmt.Errorf("readiness check: %w", err)
	}
	return nil
}

// setupClusterAPI registers the Cluster API infrastructure provider's controllers.
func setupClusterAPI(mgr ctrl.Manager, o Options) error {
	rec := mgr.GetEventRecorder("virtpod-capi")
	clusters := &virtpodcluster.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: rec}
	if err := clusters.SetupWithManager(mgr, o.SecondInstance); err != nil {
		return fmt.Errorf("setting up the VirtPodCluster controller: %w", err)
	}
	machines := &virtpodmachine.Reconciler{Client: mgr.GetClient(), Recorder: rec}
	if err := machines.SetupWithManager(mgr, o.Workers, o.SecondInstance); err != nil {
		return fmt.Errorf("setting up the VirtPodMachine controller: %w", err)
	}
	templates := &virtpodmachinetemplate.Reconciler{Client: mgr.GetClient()}
	if err := templates.SetupWithManager(mgr, o.SecondInstance); err != nil {
		return fmt.Errorf("setting up the VirtPodMachineTemplate controller: %w", err)
	}
	return nil
}
