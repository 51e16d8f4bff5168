// Package e2e tests virtpod through the whole stack on the local one-node cluster
// (tools/dev/localcluster): kubectl apply of a VirtualMachine ends with a guest running in a pod a
// kubelet started. Run with `make test-e2e`, which brings the cluster up.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/controllers/manager"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/bootcount"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

var (
	kube          client.Client
	kubeset       *kubernetes.Clientset
	kubectl       string
	restConfig    *rest.Config // the cluster admin's, for clients with other identities
	release       string       // the folder of the release installed (make e2e-releases)
	installedFile = "install.yaml"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if err := flag.Set("test.parallel", parallelTests); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	if err := setup(); err != nil {
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "FAIL: end-to-end prerequisites:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "SKIP: end-to-end tests need the local cluster (make test-e2e):", err)
		os.Exit(0)
	}
	stop := make(chan struct{})
	countBoots(stop)
	code := m.Run()
	close(stop)
	if err := bootcount.Write("tests/e2e"); err != nil {
		fmt.Fprintln(os.Stderr, "boot count:", err)
		code = 1
	}
	// Last, once everything passed: remove virtpod as a user does, and find no orphan.
	if code == 0 {
		if err := uninstall(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: uninstall:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// setup connects to the cluster and installs virtpod the way a user does: a release's
// install.yaml, its images pulled by digest from the cluster's registry.
func setup() error {
	kubectl = os.Getenv("KUBECTL")
	kubeconfig := os.Getenv("KUBECONFIG")
	if kubectl == "" || kubeconfig == "" {
		return fmt.Errorf("KUBECTL and KUBECONFIG are not set")
	}
	// Errors only: clients made later (a tenant's) would otherwise warn of no logger.
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	restConfig = cfg
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		return err
	}
	// The tests' own client pods run in the VMs' namespaces, which enforce Pod Security
	// restricted: they get what that level asks, unless they say otherwise.
	kube = interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			if p, ok := o.(*corev1.Pod); ok {
				restrict(p)
			}
			return c.Create(ctx, o, opts...)
		},
	})
	if kubeset, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if _, err := kubeset.Discovery().ServerVersion(); err != nil {
		return fmt.Errorf("cluster unreachable: %w", err)
	}
	if release = os.Getenv("VIRTPOD_RELEASE"); release == "" {
		return fmt.Errorf("VIRTPOD_RELEASE is not set: make test-e2e pushes a release to the cluster's registry (make e2e-releases)")
	}
	return installRelease(release, installedFile)
}

// installRelease installs (or upgrades to) the release in dir from its file, which the uninstall
// then deletes (applyRelease).
func installRelease(dir, file string) error {
	if err := applyRelease(dir, file); err != nil {
		return err
	}
	installedFile = file
	return nil
}

// applyRelease applies one file of the release in dir with tools/dev/install-release.sh:
// `kubectl apply --server-side`, with the local cluster's settings on top.
func applyRelease(dir, file string) error {
	cmd := exec.Command("bash", kubeapi.Root()+"/tools/dev/install-release.sh", dir, file)
	cmd.Env = append(os.Environ(), "KUBECTL="+kubectl)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("installing %s from %s: %v\n%s", file, dir, err, out)
	}
	return nil
}

func run(args ...string) (string, error) {
	out, err := exec.Command(kubectl, args...).CombinedOutput()
	return string(out), err
}

// restrictedLabels make a namespace enforce Pod Security restricted, as every namespace the tests
// run VMs in does: runner pods need no more (docs/security.md).
var restrictedLabels = map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}

// restrict gives a test's client pod what Pod Security restricted asks, where it set nothing.
func restrict(p *corev1.Pod) {
	if p.Spec.SecurityContext == nil {
		nobody := int64(65534)
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: &nobody, RunAsGroup: &nobody, FSGroup: &nobody,
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	}
	for i := range p.Spec.Containers {
		if c := &p.Spec.Containers[i]; c.SecurityContext == nil {
			c.SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
		}
	}
}

// The parallel phase: after the sequential tests, the long test (the tenant's workers, minutes
// of emulated boots) runs from the phase's start, and the other parallel-safe tests run one at
// a time beside it. Go's own -parallel gate cannot say which test goes first (its wake-up order
// is the runtime's), so TestMain opens it wide and these decide.
var shortSlot = make(chan struct{}, 1)

// parallelTests is how many tests may pass Go's gate at once: all of this package's.
const parallelTests = "64"

// parallelSafe marks a test that only makes VMs and objects in its own namespace and changes
// nothing cluster-wide (no agent restart, node, image map, upgrade, cordon or count of the
// node's room): it runs after the sequential tests, one such test at a time beside the long
// one. Its guest mostly waits on one emulated vCPU, so the second core is used meanwhile.
func parallelSafe(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	shortSlot <- struct{}{}
	t.Cleanup(func() { <-shortSlot })
	// The CI report's per-test times leave the wait out (tools/dev/ci/testlog reads these words).
	t.Logf("ci: queued %.2fs", time.Since(begin).Seconds())
}

// parallelLong marks the parallel-safe test that outlasts the others together: it starts with
// the parallel phase, beside them.
func parallelLong(t *testing.T) { t.Parallel() }

func namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-", Labels: maps.Clone(restrictedLabels)}}
	if err := kube.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	nsTests.Store(ns.Name, t.Name())
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run("-n", ns.Name, "get", "vm,pods,events", "-o", "wide")
			t.Logf("namespace %s at failure:\n%s", ns.Name, out)
		}
		_ = kube.Delete(context.Background(), ns)
	})
	return ns.Name
}

// eventually polls check until it passes or timeout; the cluster works at its own pace.
func eventually(t testing.TB, what string, timeout time.Duration, check func() error) {
	t.Helper()
	kubeapi.Eventually(t, what, timeout, check)
}

func podLogs(ns, pod string) string {
	b, err := kubeset.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).Do(context.Background()).Raw()
	if err != nil {
		return ""
	}
	return string(b)
}

func contains(s string, parts ...string) error {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return fmt.Errorf("%q not in:\n%s", p, s)
		}
	}
	return nil
}

// runPod creates a one-shot client pod and returns its output once it has succeeded; a failed
// pod fails the test with its output.
func runPod(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	ctx := context.Background()
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	if err := kube.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	eventually(t, p.Name+" pod done", 2*time.Minute, func() error {
		got := &corev1.Pod{}
		if err := kube.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		switch got.Status.Phase {
		case corev1.PodSucceeded:
			return nil
		case corev1.PodFailed:
			t.Fatalf("%s pod failed:\n%s", p.Name, podLogs(p.Namespace, p.Name))
		}
		return fmt.Errorf("%s pod %s", p.Name, got.Status.Phase)
	})
	return podLogs(p.Namespace, p.Name)
}

// deleteAndFollow deletes the VM and returns its runner's log (the console) up to the pod's end,
// once the pod is gone.
func deleteAndFollow(t *testing.T, vm *vmv1.VirtualMachine, timeout time.Duration) string {
	t.Helper()
	ctx := context.Background()
	pod := podspec.PodName(vm.Name)
	logs := followLogs(t, vm.Namespace, pod)
	if err := kube.Delete(ctx, vm); err != nil {
		t.Fatal(err)
	}
	eventually(t, "runner pod gone", timeout, func() error {
		_, err := kubeset.CoreV1().Pods(vm.Namespace).Get(ctx, pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("pod still there (%v)", err)
	})
	return <-logs
}
