package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/tests/kubeapi"
	"github.com/virtpod/virtpod/tools/release/manifests"
)

// devRunner is the runner image as `make images` and the Tilt loop build it (Debian 13's QEMU
// and virtiofsd, the release's default), by the tag the dev loop's VM names so the image map can
// move it (config/local-settings allows it).
const devRunner = "localhost/virtpod/runner:dev"

// withShares gives vm the dev loop's shares and runner image (devRunner): dev, an emptyDir the
// loop copies files into, mounted by the guest under its web root, conf (withConfShare), and
// key, the Secret <name>-key (mode 0400, readable by the runner's group alone), served under
// /key: a test guest, not how to treat a Secret.
func withShares(t *testing.T, vm *vmv1.VirtualMachine) {
	t.Helper()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: vm.Name + "-key"}, StringData: map[string]string{"token": "s3cret"}}
	if err := kube.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	vm.Spec.RunnerImage = devRunner
	share(vm, vmv1.Filesystem{Name: "dev", EmptyDir: &vmv1.FilesystemEmptyDir{}}, "/www/dev")
	withConfShare(t, vm)
	share(vm, vmv1.Filesystem{Name: "key", Secret: &vmv1.FilesystemSecret{SecretName: sec.Name}}, "/www/key")
}

// withConfShare gives vm the share conf, the ConfigMap <name>-conf (made here, colour: blue),
// served by the guest under /conf; on its class's runner image unless the VM names another.
func withConfShare(t *testing.T, vm *vmv1.VirtualMachine) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: vm.Name + "-conf"}, Data: map[string]string{"colour": "blue"}}
	if err := kube.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	share(vm, vmv1.Filesystem{Name: "conf", ConfigMap: &vmv1.FilesystemConfigMap{Name: cm.Name}}, "/www/conf")
}

// share adds f to vm, and the kernel argument with which the test guest mounts it at dir.
func share(vm *vmv1.VirtualMachine, f vmv1.Filesystem, dir string) {
	vm.Spec.Guest.Filesystems = append(vm.Spec.Guest.Filesystems, f)
	vm.Spec.Guest.KernelArgs = strings.TrimSpace(vm.Spec.Guest.KernelArgs + " virtpod.fs=" + f.Name + ":" + dir)
}

// checkConfShare: the guest serves its ConfigMap share, and serves the ConfigMap's update
// within the kubelet's sync period, with no restart.
func checkConfShare(t *testing.T, ns, name string) {
	t.Helper()
	// Running is the guest's start: its init mounts the share a moment later.
	eventually(t, "the guest's share mounted", time.Minute, func() error {
		return contains(podLogs(ns, podspec.PodName(name)), "VIRTPOD-GUEST-FS conf /www/conf mounted ro")
	})
	ip := getVM(t, ns, name).Status.PodIP
	cm := &corev1.ConfigMap{}
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name + "-conf"}, cm); err != nil {
		t.Fatal(err)
	}
	guestPage(t, ip, "/conf/colour", "blue", 30*time.Second)
	cm.Data["colour"] = "green"
	if err := kube.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	updated := time.Now()
	served := guestPage(t, ip, "/conf/colour", "green", 2*time.Minute)
	t.Logf("ConfigMap update to the guest serving it: %v (the kubelet's sync period is 10 s here)", served.Sub(updated).Round(100*time.Millisecond))
}

// checkShares is the dev loop without a reboot, as Tilt's live_update does it: a file copied
// into the runner container (kubectl cp, the same tar-over-exec Tilt's sync() uses) is served
// by the guest to another pod at once; and the ConfigMap, updated, is what the guest serves
// within the kubelet's sync period, with no restart.
func checkShares(t *testing.T, ns, name string) {
	t.Helper()
	pod := podspec.PodName(name)
	if err := contains(podLogs(ns, pod), "VIRTPOD-GUEST-FS dev /www/dev mounted rw", "VIRTPOD-GUEST-FS conf /www/conf mounted ro",
		"VIRTPOD-GUEST-FS key /www/key mounted ro"); err != nil {
		t.Fatalf("the guest's shares: %v", err)
	}
	ip := getVM(t, ns, name).Status.PodIP

	page := filepath.Join(t.TempDir(), "index.html")
	want := fmt.Sprintf("synced by the dev loop at %d\n", time.Now().UnixNano())
	if err := os.WriteFile(page, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	copied := time.Now()
	if out, err := run("-n", ns, "cp", page, pod+":"+podspec.FilesystemsMount+"/dev/index.html", "-c", vmv1.RunnerContainer); err != nil {
		t.Fatalf("kubectl cp into the runner container: %v\n%s", err, out)
	}
	served := guestPage(t, ip, "/dev/index.html", want, 30*time.Second)
	t.Logf("kubectl cp to the guest serving the file: %v", served.Sub(copied).Round(10*time.Millisecond))
	if err := contains(fetchPathFrom(t, ns, "devclient", ip, 80, "/dev/index.html"), want); err != nil {
		t.Errorf("another pod fetching the synced page: %v", err)
	}

	// The Tiltfile's sync step (tools/dev/devloop/sync.sh): a directory, nested, over the same
	// tar-over-exec.
	site := t.TempDir()
	if err := os.MkdirAll(filepath.Join(site, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(site, "app", "v.txt"), []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	script := exec.Command("bash", kubeapi.Root()+"/tools/dev/devloop/sync.sh", name, "dev", site)
	script.Env = append(os.Environ(), "NAMESPACE="+ns, "RESTART=echo restart hook ran")
	out, err := script.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "restart hook ran") {
		t.Fatalf("sync.sh: %v\n%s", err, out)
	}
	guestPage(t, ip, "/dev/app/v.txt", want, 30*time.Second)

	// The other direction: what the guest wrote into its share (its hostname, at boot) is in
	// the runner container for the loop to read back.
	if out, err := run("-n", ns, "exec", pod, "-c", vmv1.RunnerContainer, "--", "cat", podspec.FilesystemsMount+"/dev/from-guest"); err != nil || out == "" {
		t.Errorf("the guest's file in the share, read in the runner container: %v %q", err, out)
	}

	// Shares do not migrate: the VM says so, with the reason (a drain stops it).
	eventually(t, "Migratable=False FilesystemNotMigratable", 30*time.Second, func() error {
		c := meta.FindStatusCondition(getVM(t, ns, name).Status.Conditions, vmv1.ConditionMigratable)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != vmv1.ReasonFilesystemNotMigratable {
			return fmt.Errorf("Migratable is %+v", c)
		}
		return nil
	})

	guestPage(t, ip, "/key/token", "s3cret", 30*time.Second)
	checkConfShare(t, ns, name)
}

// guestPage waits until the guest at ip serves path with body want, from this node (the pod
// network is reachable here), and returns when it did.
func guestPage(t *testing.T, ip, path, want string, timeout time.Duration) time.Time {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	var got string
	eventually(t, fmt.Sprintf("the guest serving %q at %s", want, path), timeout, func() error {
		resp, err := c.Get("http://" + ip + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if got = string(b); resp.StatusCode != http.StatusOK || got != want {
			return fmt.Errorf("%s: %q", resp.Status, got)
		}
		return nil
	})
	return time.Now()
}

// TestSharesRefusedBeforeAPod: with the release's providerclass-qemu-7.2.yaml applied as an
// admin would, the qemu class's runner is Debian 12's QEMU 7.2, which has no virtiofsd: a VM with
// filesystems that names no runner image gets no runner pod, but ProviderAvailable, Scheduled
// and Ready False/RunnerLacksFeature with the fix (the runner images it may name instead, the
// default one among them), and a warning event; no restart loop. The release's install.yaml
// then puts the default class back. No guest boots.
func TestSharesRefusedBeforeAPod(t *testing.T) {
	ctx := context.Background() // sequential: it changes the default class for a while
	lock := readLock(t, release)
	qemu72(t)
	ns := namespace(t)
	vm := newVM(ns, "shares")
	vm.Spec.Guest.Filesystems = []vmv1.Filesystem{{Name: "dev", EmptyDir: &vmv1.FilesystemEmptyDir{}}}
	if err := kube.Create(ctx, vm); err != nil {
		t.Fatal(err)
	}
	want := "spec.guest.filesystems needs a runner image with virtiofsd (runner feature VirtioFS); ProviderClass qemu's runner image lacks it"
	eventually(t, "ProviderAvailable, Scheduled and Ready False/RunnerLacksFeature, and the event", time.Minute, func() error {
		got := getVM(t, ns, vm.Name)
		for _, ty := range []string{vmv1.ConditionProviderAvailable, vmv1.ConditionScheduled, vmv1.ConditionReady} {
			c := meta.FindStatusCondition(got.Status.Conditions, ty)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != vmv1.ReasonRunnerLacksFeature {
				return fmt.Errorf("%s %+v", ty, c)
			}
			if err := contains(c.Message, want, "name a runner image that has it in spec.runnerImage (allowed: "+lock["virtpod/runner"].Digest); err != nil {
				return err
			}
		}
		events := &eventsv1.EventList{}
		if err := kube.List(ctx, events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == vmv1.ReasonRunnerLacksFeature && strings.Contains(e.Note, "No runner pod starts: "+want) {
				return nil
			}
		}
		return fmt.Errorf("no warning event %s among %d", vmv1.ReasonRunnerLacksFeature, len(events.Items))
	})
	if _, err := kubeset.CoreV1().Pods(ns).Get(ctx, podspec.PodName(vm.Name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a runner pod for a VM its runner cannot serve: %v", err)
	}
}

// qemu72 applies the release's providerclass-qemu-7.2.yaml as an admin does (kubectl apply
// --server-side, the field manager install.yaml was applied with), under the local cluster's
// settings as the release's install is (emulation, the runner images `make images` tags), and
// installs the release again when the test ends, which puts the default class back.
func qemu72(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		if err := installRelease(release, installedFile); err != nil {
			t.Errorf("the default class back: %v", err)
		}
	})
	if err := applyRelease(release, manifests.QEMU72.File); err != nil {
		t.Fatal(err)
	}
}
