package podspec_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/virtpod/virtpod/controllers/manager"
	"github.com/virtpod/virtpod/tests/kubeapi"
	"github.com/virtpod/virtpod/tests/prereq"
)

// fuzzKubeconfig hands the coordinator's API server to its fuzz workers.
const fuzzKubeconfig = "VIRTPOD_FUZZ_KUBECONFIG"

// fuzzServer returns a client of the one API server FuzzRender checks pods against. Under
// `go test -fuzz` the coordinator starts it before its workers and passes them a kubeconfig
// in the environment they inherit: a worker is stopped with SIGINT then SIGKILL a second after
// its last input, which would leave a server of its own running.
func fuzzServer(f *testing.F) client.Client {
	if path := os.Getenv(fuzzKubeconfig); path != "" && isFuzzWorker() {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			f.Fatal(err)
		}
		cfg.QPS, cfg.Burst = 1000, 2000 // client-go's default of 5/s would be the fuzzer's speed
		c, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
		if err != nil {
			f.Fatal(err)
		}
		return c
	}
	apiserver, etcd := os.Getenv("TEST_ASSET_KUBE_APISERVER"), os.Getenv("TEST_ASSET_ETCD")
	prereq.Need(f, exists(apiserver) && exists(etcd), fmt.Sprintf("kube-apiserver (%q) or etcd (%q) missing: "+
		"run `make fuzz-podspec`, or `make test-controller` for the seeds, which build them", apiserver, etcd))
	env, err := kubeapi.Start()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		if err := env.Stop(); err != nil {
			f.Errorf("stopping the control plane: %v", err)
		}
	})
	path, err := env.Kubeconfig(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	f.Setenv(fuzzKubeconfig, path)
	return env.Client
}

func isFuzzWorker() bool {
	w := flag.Lookup("test.fuzzworker")
	return w != nil && w.Value.String() == "true"
}

func exists(p string) bool {
	if p == "" {
		return false
	}
	_, err := os.Stat(p)
	return err == nil
}
