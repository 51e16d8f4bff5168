package nodeagent

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// apiClient checks the node's name and makes the client that reads VirtualMachines and writes
// the node's report.
func apiClient(o Options) (client.Client, error) {
	if o.NodeName == "" {
		return nil, errors.New("node name unknown: set NODE_NAME from the downward API (fieldRef spec.nodeName) or pass --node-name")
	}
	cfg, err := restConfig(o.Kubeconfig)
	if err != nil {
		return nil, err
	}
	// A node's runners all wait on the agent's authorization when many start at once (a
	// node's VMs after it reboots): client-go's default of 5 requests a second would queue them.
	cfg.QPS, cfg.Burst = 20, 40
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := vmv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	kube, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return kube, nil
}

// clientset is the executors' client for watching and patching pods.
func clientset(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cs, nil
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
