// Package devloop tests the dev loop's scripts — retag.sh, the Tilt-less image step, and
// tilt-image-map.sh, the Tiltfile's — and its VM against a real kube-apiserver (tests/kubeapi)
// with virtpod's CRD, and a private containerd.
package devloop

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/virtpod/virtpod/pkg/image/ociimage"
	"github.com/virtpod/virtpod/tests/containerdtest"
	"github.com/virtpod/virtpod/tests/kubeapi"
	"github.com/virtpod/virtpod/tests/prereq"
)

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func TestDevLoop(t *testing.T) {
	prereq.Need(t, os.Geteuid() == 0, "containerd needs root")
	apiserver, etcd := os.Getenv("TEST_ASSET_KUBE_APISERVER"), os.Getenv("TEST_ASSET_ETCD")
	prereq.Need(t, exists(apiserver) && exists(etcd), "kube-apiserver and etcd: set TEST_ASSET_KUBE_APISERVER and TEST_ASSET_ETCD (make test does)")
	ctrdBin := containerdtest.Dir(t)
	kubectl := os.Getenv("KUBECTL")
	if kubectl == "" {
		kubectl = filepath.Join(prereq.Cache(), "k8s-v1.37.2", "kubectl")
	}
	prereq.Need(t, exists(kubectl), "kubectl ("+kubectl+"): run make k8s-binaries or set KUBECTL")

	env, err := kubeapi.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kubeconfig, err := env.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "virtpod-system"}}); err != nil {
		t.Fatal(err)
	}
	sock := containerdtest.Start(t, ctrdBin)
	ctr := filepath.Join(ctrdBin, "ctr")

	// An image in containerd under its :dev tag, as make cluster-up leaves the runner.
	l := ociimage.NewLayer("file")
	if err := l.File("/hello", 0o644, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	img, err := ociimage.Image(v1.Config{}, l)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "img.tar")
	if err := ociimage.WriteArchive(archive, "localhost/virtpod/runner:dev", img); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(ctr, "-a", sock, "-n", "k8s.io", "images", "import", "--no-unpack", archive).CombinedOutput(); err != nil {
		t.Fatalf("ctr import: %v\n%s", err, out)
	}

	// The map already holds a comment, another image's line and an older line for this one.
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "virtpod-system", Name: "virtpod-image-map"},
		Data: map[string]string{"images": "# set by hand\n" +
			"localhost/virtpod/guest localhost/virtpod/guest:tilt-1\n" +
			"localhost/virtpod/runner localhost/virtpod/runner:tilt-old\n"},
	}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}

	script, _ := filepath.Abs("retag.sh")
	// retag returns the script's stdout, or its stderr when it fails.
	retag := func(args ...string) (string, error) {
		cmd := exec.Command(script, args...)
		cmd.Env = append(os.Environ(), "KUBECTL="+kubectl, "KUBECONFIG="+kubeconfig, "CTR="+ctr, "CONTAINERD_ADDRESS="+sock)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return stderr.String(), err
		}
		if stderr.Len() > 0 {
			t.Logf("retag %q stderr: %s", args, stderr.String())
		}
		return strings.TrimSpace(string(out)), nil
	}
	images := func() string {
		out, err := exec.Command(ctr, "-a", sock, "-n", "k8s.io", "images", "ls", "-q").CombinedOutput()
		if err != nil {
			t.Fatalf("ctr images ls: %v\n%s", err, out)
		}
		return string(out)
	}
	mapData := func() string {
		var got corev1.ConfigMap
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cm), &got); err != nil {
			t.Fatal(err)
		}
		return got.Data["images"]
	}

	for _, tag := range []string{"tilt-3f2a1c", "tilt-4b5c6d", "tilt-4b5c6d"} { // the last: a rerun
		out, err := retag("localhost/virtpod/runner:dev", tag)
		if err != nil || out != "localhost/virtpod/runner:"+tag {
			t.Fatalf("retag %s: %v\n%s", tag, err, out)
		}
		if !strings.Contains(images(), "localhost/virtpod/runner:"+tag+"\n") {
			t.Errorf("containerd has no localhost/virtpod/runner:%s:\n%s", tag, images())
		}
		want := "# set by hand\nlocalhost/virtpod/guest localhost/virtpod/guest:tilt-1\nlocalhost/virtpod/runner localhost/virtpod/runner:" + tag + "\n"
		if got := mapData(); got != want {
			t.Errorf("after retag %s the map is\n%q\nwant\n%q", tag, got, want)
		}
	}

	// A whole reference as NEWTAG, as tests/e2e passes it.
	if out, err := retag("localhost/virtpod/runner:dev", "localhost/virtpod/runner:e2e-1"); err != nil || out != "localhost/virtpod/runner:e2e-1" {
		t.Fatalf("retag to a reference: %v\n%s", err, out)
	}
	if got := mapData(); !strings.HasSuffix(got, "localhost/virtpod/runner localhost/virtpod/runner:e2e-1\n") || strings.Count(got, "localhost/virtpod/runner ") != 1 {
		t.Errorf("after retag to a reference the map is %q", got)
	}

	// Without the ConfigMap, retag creates it.
	if err := env.Client.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if out, err := retag("localhost/virtpod/runner:tilt-4b5c6d", "again"); err != nil {
		t.Fatalf("retag without a ConfigMap: %v\n%s", err, out)
	}
	if got := mapData(); got != "localhost/virtpod/runner localhost/virtpod/runner:again\n" {
		t.Errorf("created map %q", got)
	}

	// The Tiltfile's step: both images' new references at once, then tilt down.
	tiltStep, _ := filepath.Abs("tilt-image-map.sh")
	tilt := func(env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command(tiltStep, args...)
		cmd.Env = append(append(os.Environ(), "KUBECTL="+kubectl, "KUBECONFIG="+kubeconfig), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("tilt-image-map.sh %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := tilt([]string{"TILT_IMAGE_0=localhost/virtpod/runner:tilt-build-1", "TILT_IMAGE_1=localhost/virtpod/guest:tilt-build-2"},
		"apply", "localhost/virtpod/runner", "localhost/virtpod/guest")
	if !strings.Contains(out, "kind: ConfigMap") || !strings.Contains(out, "name: virtpod-image-map") {
		t.Errorf("apply printed no ConfigMap YAML for Tilt:\n%s", out)
	}
	if got, want := mapData(), "localhost/virtpod/runner localhost/virtpod/runner:tilt-build-1\nlocalhost/virtpod/guest localhost/virtpod/guest:tilt-build-2\n"; got != want {
		t.Errorf("after Tilt's apply the map is %q, want %q", got, want)
	}
	tilt(nil, "delete", "localhost/virtpod/runner")
	if got, want := mapData(), "localhost/virtpod/guest localhost/virtpod/guest:tilt-build-2\n"; got != want {
		t.Errorf("after Tilt's delete the map is %q, want %q", got, want)
	}

	// The Tiltfile's VM is valid against the CRD (kubectl validates fields strictly).
	if out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-f", "vm.yaml").CombinedOutput(); err != nil {
		t.Errorf("vm.yaml: %v\n%s", err, out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"localhost/virtpod/runner:dev"}, "usage:"},
		{[]string{"localhost/virtpod/missing:dev", "x"}, "is localhost/virtpod/missing:dev in containerd?"},
		{[]string{"localhost/virtpod/runner:dev", "bad tag"}, "NEWTAG bad tag is not a tag"},
		{[]string{"localhost/virtpod/runner:dev", "localhost/virtpod/runner"}, "has no tag"},
		{[]string{"localhost/virtpod/runner:dev", "localhost/virtpod/runner@sha256:abc"}, "is a digest reference"},
	} {
		if out, err := retag(tc.args...); err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("retag %q: %v %q, want an error with %q", tc.args, err, out, tc.want)
		}
	}
}

// TestSyncRefusesBadInput: sync.sh says what is wrong before it touches a cluster (the
// end-to-end test, tests/e2e, syncs into a running VM with it).
func TestSyncRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dev", "site"}, "usage:"},
		{[]string{"dev", "site", filepath.Join(dir, "missing")}, "is not a directory"},
		{[]string{"dev", "Site_1", dir}, "SHARE Site_1 is not a filesystem name"},
		{[]string{"dev", "site-", dir}, "is not a filesystem name"},
	} {
		cmd := exec.Command("bash", "sync.sh")
		cmd.Args = append(cmd.Args, tc.args...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("sync.sh %q: %v %q, want an error with %q", tc.args, err, out, tc.want)
		}
	}
}
