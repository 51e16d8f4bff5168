// Command virtpod-controller runs virtpod's controllers.
package main

import (
	"flag"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/leaderelection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/virtpod/virtpod/controllers/manager"
	"github.com/virtpod/virtpod/pkg/podspec"
)

func main() {
	o := manager.Options{Pod: podspec.DefaultOptions(), MetricsRegistry: crmetrics.Registry}
	var overheadCPU, overheadMem, imageMap string
	var qps float64
	var burst int
	flag.StringVar(&o.Pod.RunnerImage, "runner-image", o.Pod.RunnerImage, "runner image for VMs that do not name one")
	flag.StringVar(&overheadCPU, "runner-overhead-cpu", o.Pod.OverheadCPU.String(), "CPU added to each runner pod's request for the runner and hypervisor")
	flag.StringVar(&overheadMem, "runner-overhead-memory", o.Pod.OverheadMemory.String(), "memory added to each runner pod's request and limit for the runner and hypervisor")
	flag.IntVar(&o.Pod.CPUAllocationRatio, "cpu-allocation-ratio", o.Pod.CPUAllocationRatio, "guest vCPUs per requested CPU: a runner pod requests cpus/ratio plus the overhead (its limit stays at the full cpus); 1 reserves a CPU per vCPU")
	flag.StringVar(&imageMap, "image-map", "", "NAMESPACE/NAME of a ConfigMap that rewrites image names (for development loops); empty: off")
	flag.BoolVar(&o.Pod.CopyImages, "copy-images", false, "deliver kernel and disk by init containers that copy them into emptyDirs, for clusters without image volumes")
	flag.BoolVar(&o.ClusterAPI, "cluster-api", false, "run the Cluster API infrastructure provider (VirtPodCluster, VirtPodMachine); needs Cluster API's CRDs")
	flag.IntVar(&o.Workers, "workers", 4, "VirtualMachines reconciled in parallel")
	flag.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "metrics endpoint address; 0 disables it")
	flag.StringVar(&o.PprofAddr, "pprof-bind-address", "", "address of Go's profiling endpoints (/debug/pprof/); empty: off. Profiles show the controller's internals: keep it on localhost")
	flag.StringVar(&o.HealthAddr, "health-probe-bind-address", ":8081", "health and readiness probe address")
	flag.BoolVar(&o.LeaderElection, "leader-elect", true, "elect a leader so only one replica reconciles")
	flag.StringVar(&o.LeaderElectionNS, "leader-election-namespace", "", "namespace of the leader lease (default: the pod's)")
	flag.DurationVar(&o.Lease.Duration, "leader-elect-lease-duration", 15*time.Second, "how long a standby waits for a leader that stopped renewing before it takes over")
	flag.DurationVar(&o.Lease.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long a leader keeps trying to renew before it stops leading (less than the lease duration)")
	flag.DurationVar(&o.Lease.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often replicas renew or try to take the lease")
	flag.StringVar(&o.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "the controller's own namespace, where readiness dry-runs a VirtualMachine (default: $POD_NAMESPACE)")
	flag.Float64Var(&qps, "kube-api-qps", 200, "API requests per second the controller may make")
	flag.IntVar(&burst, "kube-api-burst", 400, "API request burst")
	zopts := zap.Options{}
	zopts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zopts)))
	log := ctrl.Log.WithName("setup")

	var err error
	if o.Pod.OverheadCPU, err = resource.ParseQuantity(overheadCPU); err != nil {
		log.Error(err, "--runner-overhead-cpu must be a quantity such as 100m")
		os.Exit(2)
	}
	if o.Pod.OverheadMemory, err = resource.ParseQuantity(overheadMem); err != nil {
		log.Error(err, "--runner-overhead-memory must be a quantity such as 64Mi")
		os.Exit(2)
	}
	if o.Pod.CPUAllocationRatio < 1 {
		log.Error(nil, "--cpu-allocation-ratio must be 1 or more (1 reserves a whole CPU per vCPU)", "got", o.Pod.CPUAllocationRatio)
		os.Exit(2)
	}
	if l := o.Lease; o.LeaderElection && (l.RetryPeriod <= 0 || l.RenewDeadline <= time.Duration(leaderelection.JitterFactor*float64(l.RetryPeriod)) || l.Duration <= l.RenewDeadline) {
		log.Error(nil, "leader election needs --leader-elect-lease-duration > --leader-elect-renew-deadline > 1.2 × --leader-elect-retry-period > 0, for example 15s, 10s, 2s",
			"leaseDuration", l.Duration, "renewDeadline", l.RenewDeadline, "retryPeriod", l.RetryPeriod)
		os.Exit(2)
	}
	if imageMap != "" {
		ns, name, ok := strings.Cut(imageMap, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			log.Error(nil, "--image-map must be NAMESPACE/NAME, for example virtpod-system/virtpod-image-map", "got", imageMap)
			os.Exit(2)
		}
		o.ImageMap = types.NamespacedName{Namespace: ns, Name: name}
	}
	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = float32(qps), burst
	mgr, err := manager.New(cfg, o)
	if err != nil {
		log.Error(err, "cannot start")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "health check")
		os.Exit(1)
	}
	// Readiness (/readyz) is manager.New's: ready once a VirtualMachine can be created.
	log.Info("starting", "runnerImage", o.Pod.RunnerImage, "workers", o.Workers, "imageMap", imageMap, "copyImages", o.Pod.CopyImages, "clusterAPI", o.ClusterAPI)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
