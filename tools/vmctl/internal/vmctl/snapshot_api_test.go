package vmctl

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestSnapshotVerbsAgainstAPIServer runs vmctl snapshot, snapshots, restore, clone and export
// in-process against a real API server. No controller runs: the test writes the snapshots' and
// restores' status through the status subresource as controllers/snapshot would, and plays the
// kubelet of the export pod. The namespace enforces Pod Security restricted, as VM namespaces do.
func TestSnapshotVerbsAgainstAPIServer(t *testing.T) {
	kc := needAPI(t)
	ctx := context.Background()
	const ns = "snaps"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}); err != nil {
		t.Fatal(err)
	}
	kcNS := inNamespace(t, kc, ns)
	run := func(args ...string) (string, string, int) {
		return vmctlWithin(t, 60*time.Second, append([]string{"--kubeconfig", kcNS}, args...)...)
	}

	web := kubeapi.SampleVM(ns, "web") // running
	createVMWithStatus(t, web, vmv1.VirtualMachineStatus{Phase: vmv1.PhaseRunning, PodName: "web-runner", PodUID: "uid-web"})
	db := kubeapi.SampleVM(ns, "db") // stopped
	db.Spec.RunStrategy = vmv1.RunHalted
	createVMWithStatus(t, db, vmv1.VirtualMachineStatus{Phase: vmv1.PhaseStopped, Images: &vmv1.Images{Runner: "example.org/virtpod/runner:v7"}})

	t.Run("snapshot of a missing VM", func(t *testing.T) {
		_, errOut, code := run("snapshot", "nope")
		oneErrorLine(t, "snapshot nope", errOut, code, `VirtualMachine "nope" not found in namespace "snaps"`, "kubectl get vm -n snaps")
	})

	t.Run("snapshot --wait=false", func(t *testing.T) {
		out, errOut, code := run("snapshot", "web", "web-a", "--full", "--storage-class", "fast", "--deadline", "30m", "--wait=false")
		if code != 0 || !strings.Contains(out, "snapshot snaps/web-a of VM web created (full copy, claims of class fast)") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		s := getSnapshot(t, ns, "web-a")
		if want := (vmv1.VirtualMachineSnapshotSpec{VMName: "web", StorageClassName: "fast", Full: true, DeadlineSeconds: 1800}); s.Spec != want {
			t.Errorf("spec %+v, want %+v", s.Spec, want)
		}
		if s.ManagedFields[0].Manager != fieldManager {
			t.Errorf("field manager %q", s.ManagedFields[0].Manager)
		}
	})

	t.Run("snapshot's default name and spec", func(t *testing.T) {
		out, errOut, code := run("snapshot", "web", "--wait=false")
		m := regexp.MustCompile(`snapshot snaps/(web-\d{8}-\d{6}) of VM web created \(incremental when the VM's last snapshot allows\)`).FindStringSubmatch(out)
		if code != 0 || m == nil {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		s := getSnapshot(t, ns, m[1])
		if s.Spec.Full || s.Spec.StorageClassName != "" || s.Spec.DeadlineSeconds != 600 { // the CRD's default
			t.Errorf("spec %+v", s.Spec)
		}
		deleteObject(t, s)
	})

	t.Run("snapshot waits and reports Succeeded", func(t *testing.T) {
		done := runAsync(kcNS, "snapshot", "web", "web-b", "--timeout", "40s")
		s := awaitSnapshot(t, ns, "web-b")
		setSnapshotStatus(t, s, vmv1.VirtualMachineSnapshotStatus{Phase: vmv1.SnapshotInProgress, Base: "web-a",
			Conditions: []metav1.Condition{ready(metav1.ConditionFalse, vmv1.ReasonInProgress, "copying the running guest's disks at one instant (root, data) of VM web")}})
		time.Sleep(2 * pollEvery)
		setSnapshotStatus(t, s, succeeded(vmv1.ConsistencyGuestFrozen, "web-a", "web-b"))
		r := result(t, done)
		for _, want := range []string{
			"snapshot snaps/web-b of VM web created",
			"snapshot snaps/web-b InProgress: copying the running guest's disks at one instant",
			"snapshot snaps/web-b Succeeded after ",
			"GuestFrozen (the guest agent froze its file systems for the instant), incremental on snapshot web-a",
			"disk root:  1.5Mi read of 10Gi",
			"on claim web-b-root",
			"disk data:  0 read of 20Gi",
		} {
			if !strings.Contains(r.out, want) {
				t.Errorf("stdout lacks %q:\n%s", want, r.out)
			}
		}
		if r.code != 0 || r.errOut != "" {
			t.Errorf("exit %d, stderr %q", r.code, r.errOut)
		}
		t.Logf("vmctl snapshot web web-b:\n%s", r.out)
	})

	t.Run("snapshot that Failed", func(t *testing.T) {
		done := runAsync(kcNS, "snapshot", "web", "web-c", "--timeout", "40s")
		s := awaitSnapshot(t, ns, "web-c")
		setSnapshotStatus(t, s, vmv1.VirtualMachineSnapshotStatus{Phase: vmv1.SnapshotFailed,
			Conditions: []metav1.Condition{ready(metav1.ConditionFalse, vmv1.ReasonCopyFailed, "copier pod web-c-snapshot failed: no space left on device")}})
		r := result(t, done)
		oneErrorLine(t, "failed snapshot", r.errOut, r.code, "snapshot snaps/web-c Failed after ", "CopyFailed: copier pod web-c-snapshot failed: no space left on device")
	})

	t.Run("snapshot --timeout", func(t *testing.T) {
		_, errOut, code := run("snapshot", "web", "web-d", "--timeout", "1s")
		if code != exitTimedOut || !strings.Contains(errOut, "snapshot snaps/web-d has not ended after 1s: it is New (no status yet); the controller goes on with it") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
		deleteObject(t, getSnapshot(t, ns, "web-d"))
	})

	t.Run("snapshot usage", func(t *testing.T) {
		for _, args := range [][]string{{"snapshot"}, {"snapshot", "a", "b", "c"}, {"snapshot", "web", "--deadline", "5s"}, {"snapshots", "a", "b"}} {
			if _, errOut, code := run(args...); code != exitUsage {
				t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
			}
		}
	})

	t.Run("snapshots", func(t *testing.T) {
		out, errOut, code := run("snapshots")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "NAME ") || !strings.Contains(lines[0], "CONSISTENCY") {
			t.Fatalf("want a header and 3 snapshots:\n%s", out)
		}
		for i, want := range [][]string{
			{"web-a", "web", "New", "-", "-", "-", "-"},
			{"web-b", "web", "Succeeded", "GuestFrozen", "web-a", "30Gi", "1.5Mi"},
			{"web-c", "web", "Failed", "-", "-", "-", "-", "CopyFailed"},
		} {
			got := strings.Fields(lines[i+1])
			if len(got) < len(want) {
				t.Errorf("row %d: %q", i, lines[i+1])
				continue
			}
			for j, w := range want {
				k := j
				if j == 7 {
					k = 8 // after AGE
				}
				if got[k] != w {
					t.Errorf("row %d column %d: %q, want %q (%q)", i, k, got[k], w, lines[i+1])
				}
			}
		}
		t.Logf("vmctl snapshots:\n%s", out)
		if out, errOut, code := run("snapshots", "db"); code != 0 || out != "" || errOut != "No snapshots of VM db in namespace snaps.\n" {
			t.Errorf("snapshots db: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})

	t.Run("restore refuses", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			args []string
			want []string
		}{
			{"a running VM", []string{"restore", "web", "web-b"}, []string{"VM snaps/web is Running (runStrategy Always): a restore replaces the disks of a stopped VM only; stop it first: vmctl stop web"}},
			{"a missing snapshot", []string{"restore", "web", "nope"}, []string{`VirtualMachineSnapshot "nope" not found in namespace "snaps"`, "vmctl snapshots"}},
			{"another VM's snapshot", []string{"restore", "db", "web-b"}, []string{"snapshot snaps/web-b is of VM web, not db", "vmctl clone web NEWVM --snapshot web-b"}},
			{"a snapshot that Failed", []string{"restore", "web", "web-c"}, []string{"snapshot snaps/web-c Failed (CopyFailed: copier pod", "vmctl snapshot web"}},
		} {
			_, errOut, code := run(tc.args...)
			oneErrorLine(t, tc.name, errOut, code, tc.want...)
		}
		list := &vmv1.VirtualMachineRestoreList{}
		if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil || len(list.Items) != 0 {
			t.Errorf("restores made: %v, %v", list.Items, err)
		}
	})

	createSnapshotWithStatus(t, ns, "db-a", "db", succeeded(vmv1.ConsistencyOffline, "", "db-a"))

	t.Run("restore of a stopped VM", func(t *testing.T) {
		done := runAsync(kcNS, "restore", "db", "db-a", "--timeout", "40s")
		rs := awaitRestore(t, ns, "db")
		if rs.Spec.SnapshotName != "db-a" || !regexp.MustCompile(`^db-restore-\d{8}-\d{6}$`).MatchString(rs.Name) {
			t.Errorf("restore %s: %+v", rs.Name, rs.Spec)
		}
		setRestoreStatus(t, rs, vmv1.VirtualMachineRestoreStatus{Phase: vmv1.SnapshotSucceeded,
			Claims: []vmv1.RestoredClaim{
				{Disk: "root", From: "db-a-root", ClaimName: "db-root-r1a2b3", Replaced: "db-root"},
				{Disk: "data", From: "db-a-data", ClaimName: "db-data-r4c5d6", Replaced: "db-data"},
			},
			Conditions: []metav1.Condition{ready(metav1.ConditionTrue, vmv1.ReasonReady, "VM db names the restored claims")}})
		r := result(t, done)
		for _, want := range []string{
			"restore snaps/" + rs.Name + " created: VM db's disks are replaced by copies of snapshot db-a's",
			"restore snaps/" + rs.Name + " Succeeded after ",
			"disk root:  claim db-root-r1a2b3  (a copy of snapshot claim db-a-root)  replaces claim db-root, kept until restore " + rs.Name + " is deleted",
			"disk data:  claim db-data-r4c5d6",
			"vm snaps/db names the restored claims; start it with `vmctl start db`",
		} {
			if !strings.Contains(r.out, want) {
				t.Errorf("stdout lacks %q:\n%s", want, r.out)
			}
		}
		if r.code != 0 {
			t.Errorf("exit %d, stderr %q", r.code, r.errOut)
		}
		t.Logf("vmctl restore db db-a:\n%s", r.out)
		deleteObject(t, rs)
	})

	t.Run("restore that Failed", func(t *testing.T) {
		done := runAsync(kcNS, "restore", "db", "db-a", "--timeout", "40s")
		rs := awaitRestore(t, ns, "db")
		setRestoreStatus(t, rs, vmv1.VirtualMachineRestoreStatus{Phase: vmv1.SnapshotFailed,
			Conditions: []metav1.Condition{ready(metav1.ConditionFalse, vmv1.ReasonVMRunning, "VM db is not stopped")}})
		r := result(t, done)
		oneErrorLine(t, "failed restore", r.errOut, r.code, "restore snaps/"+rs.Name+" Failed after ", "VMRunning: VM db is not stopped")
		deleteObject(t, rs)
	})

	t.Run("clone name checks", func(t *testing.T) {
		for _, args := range [][]string{
			{"clone", "web", "Web_2"},
			{"clone", "web", "2web"},
			{"clone", "web", strings.Repeat("a", 57)},
			{"clone", "web", "web"},
			{"clone", "web"},
		} {
			if _, errOut, code := run(args...); code != exitUsage || !strings.Contains(errOut, "--help") {
				t.Errorf("%v: exit %d, stderr %q; want exit 2", args, code, errOut)
			}
		}
		for _, tc := range []struct {
			name string
			args []string
			want []string
		}{
			{"an existing NEWVM", []string{"clone", "web", "db"}, []string{"VM snaps/db already exists: a clone makes a new VM"}},
			{"a missing SOURCE", []string{"clone", "nope", "new"}, []string{`VirtualMachine "nope" not found in namespace "snaps"`}},
			{"a running SOURCE", []string{"clone", "web", "web-2"}, []string{"VM snaps/web is Running", "stop it first: vmctl stop web", "--snapshot"}},
			{"another VM's snapshot", []string{"clone", "db", "web-2", "--snapshot", "web-b"}, []string{"snapshot snaps/web-b is of VM web, not db", "vmctl clone web web-2 --snapshot web-b"}},
			{"a snapshot that Failed", []string{"clone", "web", "web-2", "--snapshot", "web-c"}, []string{"snapshot snaps/web-c Failed"}},
		} {
			_, errOut, code := run(tc.args...)
			oneErrorLine(t, tc.name, errOut, code, tc.want...)
		}
		list := &vmv1.VirtualMachineRestoreList{}
		if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil || len(list.Items) != 0 {
			t.Errorf("restores made: %v, %v", list.Items, err)
		}
	})

	t.Run("clone of a stopped VM", func(t *testing.T) {
		done := runAsync(kcNS, "clone", "db", "db-2", "--timeout", "40s")
		var snap *vmv1.VirtualMachineSnapshot
		kubeapi.Eventually(t, "the clone's snapshot", 20*time.Second, func() error {
			list := &vmv1.VirtualMachineSnapshotList{}
			if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
				return err
			}
			for i := range list.Items {
				if s := &list.Items[i]; s.Spec.VMName == "db" && s.Name != "db-a" {
					snap = s
					return nil
				}
			}
			return fmt.Errorf("none yet")
		})
		if !regexp.MustCompile(`^db-\d{8}-\d{6}$`).MatchString(snap.Name) {
			t.Errorf("snapshot name %q", snap.Name)
		}
		setSnapshotStatus(t, snap, succeeded(vmv1.ConsistencyOffline, "", snap.Name))
		rs := awaitRestore(t, ns, "db-2")
		if rs.Spec.SnapshotName != snap.Name || !regexp.MustCompile(`^db-2-clone-\d{8}-\d{6}$`).MatchString(rs.Name) {
			t.Errorf("restore %s: %+v", rs.Name, rs.Spec)
		}
		clone := kubeapi.SampleVM(ns, "db-2") // the controller makes it with the source's spec
		clone.Spec.RunStrategy = vmv1.RunHalted
		createVM(t, clone)
		setRestoreStatus(t, rs, vmv1.VirtualMachineRestoreStatus{Phase: vmv1.SnapshotSucceeded, Clone: true,
			Claims:     []vmv1.RestoredClaim{{Disk: "root", From: snap.Name + "-root", ClaimName: "db-2-root"}},
			Conditions: []metav1.Condition{ready(metav1.ConditionTrue, vmv1.ReasonReady, "VM db-2 was made")}})
		r := result(t, done)
		for _, want := range []string{
			"snapshot snaps/" + snap.Name + " of VM db created (the stopped VM's disks, copied whole)",
			"snapshot snaps/" + snap.Name + " Succeeded after ",
			"Offline (the VM was stopped), a full copy",
			"10Gi, copied whole from claim db-root",
			"restore snaps/" + rs.Name + " created: VM db-2 is made from snapshot " + snap.Name + " of VM db (a clone)",
			"restore snaps/" + rs.Name + " Succeeded after ",
			"VM db-2 was made from snapshot " + snap.Name + " on claims of its own",
			"disk root:  claim db-2-root  (a copy of snapshot claim " + snap.Name + "-root)\n",
			"vm snaps/db-2 made from snapshot " + snap.Name + " of VM db (runStrategy Halted): start it with `vmctl start db-2`",
			"snapshot snaps/" + snap.Name + " is kept",
		} {
			if !strings.Contains(r.out, want) {
				t.Errorf("stdout lacks %q:\n%s", want, r.out)
			}
		}
		if r.code != 0 {
			t.Errorf("exit %d, stderr %q", r.code, r.errOut)
		}
		t.Logf("vmctl clone db db-2:\n%s", r.out)
	})

	t.Run("clone --snapshot --wait=false", func(t *testing.T) {
		out, errOut, code := run("clone", "web", "web-3", "--snapshot", "web-b", "--wait=false")
		if code != 0 || !strings.Contains(out, "created: VM web-3 is made from snapshot web-b of VM web (a clone)") || strings.Count(out, "\n") != 1 {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		rs := awaitRestore(t, ns, "web-3")
		if rs.Spec.SnapshotName != "web-b" {
			t.Errorf("spec %+v", rs.Spec)
		}
	})

	t.Run("clone --wait=false", func(t *testing.T) {
		out, errOut, code := run("clone", "db", "db-3", "--wait=false")
		if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, "of VM db created") || !strings.Contains(out, "created: VM db-3 is made from snapshot db-") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		rs := awaitRestore(t, ns, "db-3")
		if s := getSnapshot(t, ns, rs.Spec.SnapshotName); s.Spec.VMName != "db" {
			t.Errorf("the restore's snapshot %s is of %s", s.Name, s.Spec.VMName)
		}
	})

	dir := t.TempDir()
	t.Run("export refuses", func(t *testing.T) {
		file := filepath.Join(dir, "refused.img")
		for _, tc := range []struct {
			name string
			args []string
			want []string
		}{
			{"a snapshot not Succeeded", []string{"export", "web-c", "root", "-o", file}, []string{"snapshot snaps/web-c is Failed (CopyFailed: ", "only a Succeeded snapshot can be exported"}},
			{"an unknown disk", []string{"export", "web-b", "nope", "-o", file}, []string{`snapshot snaps/web-b has no disk "nope": its disks are root, data`}},
			{"a missing snapshot", []string{"export", "nope", "root", "-o", file}, []string{`VirtualMachineSnapshot "nope" not found`}},
			{"a file it cannot write", []string{"export", "web-b", "root", "-o", filepath.Join(dir, "no", "such", "dir")}, []string{"no such file or directory"}},
		} {
			_, errOut, code := run(tc.args...)
			oneErrorLine(t, tc.name, errOut, code, tc.want...)
		}
		if _, errOut, code := run("export", "web-b", "root"); code != exitUsage || !strings.Contains(errOut, "-o FILE is required") {
			t.Errorf("without -o: exit %d, stderr %q", code, errOut)
		}
		noExportPods(t, ns)
	})

	t.Run("export pod that does not run", func(t *testing.T) {
		file := filepath.Join(dir, "pending.img")
		_, errOut, code := run("export", "db-a", "root", "-o", file, "--timeout", "2s")
		if code != exitTimedOut || !strings.Contains(errOut, "image example.org/virtpod/runner:v7") ||
			!strings.Contains(errOut, "is not running after 2s: it is Pending, not scheduled yet; it is deleted") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
		noExportPods(t, ns)
		if _, err := os.Stat(file); !os.IsNotExist(err) {
			t.Errorf("%s: %v", file, err)
		}
		if _, err := os.Stat(file + ".partial"); !os.IsNotExist(err) {
			t.Errorf("%s.partial: %v", file, err)
		}
	})

	t.Run("export pod whose exec fails", func(t *testing.T) {
		file := filepath.Join(dir, "web.img")
		done := runAsync(kcNS, "export", "web-b", "data", "-o", file, "--image", "example.org/runner:test", "--timeout", "30s")
		var p *corev1.Pod
		kubeapi.Eventually(t, "the export pod", 20*time.Second, func() error {
			list := &corev1.PodList{}
			if err := env.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/managed-by": "vmctl"}); err != nil {
				return err
			}
			if len(list.Items) != 1 {
				return fmt.Errorf("%d pods", len(list.Items))
			}
			p = &list.Items[0]
			return nil
		})
		c := p.Spec.Containers[0]
		if !regexp.MustCompile(`^web-b-export-[0-9a-f]{5}$`).MatchString(p.Name) || c.Image != "example.org/runner:test" ||
			p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "web-b-data" || !p.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly ||
			len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Name != "web-b" || p.OwnerReferences[0].Kind != "VirtualMachineSnapshot" {
			t.Errorf("export pod %s: image %s, volumes %+v, owners %+v", p.Name, c.Image, p.Spec.Volumes, p.OwnerReferences)
		}
		env.Kubelet(t, p, func(s *corev1.PodStatus) {
			s.Phase = corev1.PodRunning
			s.ContainerStatuses = []corev1.ContainerStatus{{Name: exportContainer, Image: c.Image, ImageID: c.Image, Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
		})
		r := result(t, done)
		// No kubelet serves the exec: it fails, and the pod goes all the same.
		if r.code != exitFailed || !strings.Contains(r.errOut, "error: export of disk data of snapshot snaps/web-b: ") {
			t.Errorf("exit %d, stderr %q", r.code, r.errOut)
		}
		t.Logf("vmctl export web-b data: %s", r.errOut)
		noExportPods(t, ns)
		if _, err := os.Stat(file + ".partial"); !os.IsNotExist(err) {
			t.Errorf("%s.partial: %v", file, err)
		}
	})

	t.Run("Pod Security restricted is enforced here", func(t *testing.T) {
		// So the export pods above were admitted as restricted ones.
		bad := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "root-pod"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
		if err := env.Client.Create(ctx, bad); !apierrors.IsForbidden(err) {
			t.Errorf("a pod that is not restricted: %v", err)
		}
	})
}

type vmctlResult struct {
	out, errOut string
	code        int
}

// runAsync runs vmctl in the background; result collects it.
func runAsync(kubeconfig string, args ...string) <-chan vmctlResult {
	done := make(chan vmctlResult, 1)
	go func() {
		var o, e bytes.Buffer
		c := RunIO(append([]string{"vmctl", "--kubeconfig", kubeconfig}, args...), strings.NewReader(""), &o, &e)
		done <- vmctlResult{o.String(), e.String(), c}
	}()
	return done
}

func result(t *testing.T, done <-chan vmctlResult) vmctlResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(60 * time.Second):
		t.Fatal("vmctl did not return")
		return vmctlResult{}
	}
}

func getSnapshot(t *testing.T, ns, name string) *vmv1.VirtualMachineSnapshot {
	t.Helper()
	s := &vmv1.VirtualMachineSnapshot{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func awaitSnapshot(t *testing.T, ns, name string) *vmv1.VirtualMachineSnapshot {
	t.Helper()
	var s *vmv1.VirtualMachineSnapshot
	kubeapi.Eventually(t, "snapshot "+name, 20*time.Second, func() error {
		s = &vmv1.VirtualMachineSnapshot{}
		return env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s)
	})
	return s
}

// awaitRestore is the one restore of vm (spec.vmName).
func awaitRestore(t *testing.T, ns, vm string) *vmv1.VirtualMachineRestore {
	t.Helper()
	var rs *vmv1.VirtualMachineRestore
	kubeapi.Eventually(t, "a restore of "+vm, 20*time.Second, func() error {
		list := &vmv1.VirtualMachineRestoreList{}
		if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return err
		}
		var found []*vmv1.VirtualMachineRestore
		for i := range list.Items {
			if list.Items[i].Spec.VMName == vm {
				found = append(found, &list.Items[i])
			}
		}
		if len(found) != 1 {
			return fmt.Errorf("%d restores", len(found))
		}
		rs = found[0]
		return nil
	})
	return rs
}

func setSnapshotStatus(t *testing.T, s *vmv1.VirtualMachineSnapshot, st vmv1.VirtualMachineSnapshotStatus) {
	t.Helper()
	kubeapi.Eventually(t, "snapshot status written", 10*time.Second, func() error {
		cur := getSnapshot(t, s.Namespace, s.Name)
		cur.Status = st
		return env.Client.Status().Update(context.Background(), cur)
	})
}

func setRestoreStatus(t *testing.T, rs *vmv1.VirtualMachineRestore, st vmv1.VirtualMachineRestoreStatus) {
	t.Helper()
	kubeapi.Eventually(t, "restore status written", 10*time.Second, func() error {
		cur := &vmv1.VirtualMachineRestore{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(rs), cur); err != nil {
			return err
		}
		cur.Status = st
		return env.Client.Status().Update(context.Background(), cur)
	})
}

func createSnapshotWithStatus(t *testing.T, ns, name, vm string, st vmv1.VirtualMachineSnapshotStatus) {
	t.Helper()
	s := &vmv1.VirtualMachineSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: vmv1.VirtualMachineSnapshotSpec{VMName: vm}}
	if err := env.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	setSnapshotStatus(t, s, st)
}

func deleteObject(t *testing.T, o client.Object) {
	t.Helper()
	if err := env.Client.Delete(context.Background(), o); err != nil {
		t.Fatal(err)
	}
}

func noExportPods(t *testing.T, ns string) {
	t.Helper()
	kubeapi.Eventually(t, "no export pod", 10*time.Second, func() error {
		list := &corev1.PodList{}
		if err := env.Client.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/managed-by": "vmctl"}); err != nil {
			return err
		}
		if len(list.Items) != 0 {
			return fmt.Errorf("export pods left: %s", list.Items[0].Name)
		}
		return nil
	})
}

func ready(status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: vmv1.ConditionReady, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.Now()}
}

// succeeded is a Succeeded snapshot's status as the controller writes it: disks root (10Gi) and,
// from a running guest, data (20Gi).
func succeeded(c vmv1.Consistency, base, name string) vmv1.VirtualMachineSnapshotStatus {
	now := metav1.Now()
	vm := strings.SplitN(name, "-", 2)[0]
	st := vmv1.VirtualMachineSnapshotStatus{Phase: vmv1.SnapshotSucceeded, Consistency: c, Base: base, CompletionTime: &now,
		Disks:      []vmv1.SnapshotDisk{{Disk: "root", SourceClaim: vm + "-root", ClaimName: name + "-root", SizeBytes: 10 << 30}},
		Conditions: []metav1.Condition{ready(metav1.ConditionTrue, vmv1.ReasonReady, "copied")}}
	if c != vmv1.ConsistencyOffline {
		st.Disks[0].CopiedBytes = 3 << 19
		st.Disks = append(st.Disks, vmv1.SnapshotDisk{Disk: "data", SourceClaim: vm + "-data", ClaimName: name + "-data", SizeBytes: 20 << 30})
	}
	return st
}

// TestSparseWriter: the stream arrives in pieces of any size; every 64 KiB block of zeros,
// trailing ones included, becomes a hole, and the file reads back as the stream.
func TestSparseWriter(t *testing.T) {
	const mib = 1 << 20
	var stream []byte
	data := func(n int) {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rand.IntN(255) + 1)
		}
		stream = append(stream, b...)
	}
	zeros := func(n int) { stream = append(stream, make([]byte, n)...) }
	data(sparseBlock)       // block 0: data
	zeros(4 * mib)          // blocks 1-64: holes
	data(10)                // block 65: 10 bytes of data, then zeros: written
	zeros(sparseBlock - 10) // the rest of block 65
	zeros(sparseBlock)      // block 66: a hole
	data(3 * sparseBlock)   // blocks 67-69
	zeros(4*mib + 100)      // trailing zeros: holes, the last block short
	f, err := os.Create(filepath.Join(t.TempDir(), "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := newSparseWriter(f)
	for rest := stream; len(rest) > 0; {
		n := min(len(rest), 1+rand.IntN(3*sparseBlock)) // pieces across block boundaries
		if k, err := w.Write(rest[:n]); err != nil || k != n {
			t.Fatalf("write: %d, %v", k, err)
		}
		rest = rest[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, stream) {
		t.Fatalf("read back %d bytes, not the %d written", len(got), len(stream))
	}
	if wantData := int64(5 * sparseBlock); w.data != wantData || w.data+w.holes != int64(len(stream)) {
		t.Errorf("data %d, holes %d; want data %d of %d", w.data, w.holes, wantData, len(stream))
	}
	var st syscall.Stat_t
	if err := syscall.Stat(f.Name(), &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; used > 2*mib {
		t.Errorf("%d bytes allocated for %d of data: the zeros were written", used, w.data)
	}
	t.Logf("%d bytes, %d allocated", len(stream), st.Blocks*512)
}

// TestSparseWriterEmptyAndShort: nothing written is an empty file; a stream shorter than a block
// is written whole, or left a hole when all zeros, at its own size.
func TestSparseWriterEmptyAndShort(t *testing.T) {
	dir := t.TempDir()
	for name, stream := range map[string][]byte{"empty": nil, "short": []byte("boot sector"), "zeros": make([]byte, 1000)} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		w := newSparseWriter(f)
		if _, err := w.Write(stream); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		got, err := os.ReadFile(f.Name())
		if err != nil || !bytes.Equal(got, stream) {
			t.Errorf("%s: read back %q, %v", name, got, err)
		}
	}
}

// TestExportPod: the export pod passes Pod Security restricted in a copier pod's shape, carries
// none of virtpod's reserved labels, idles until deleted, and has a valid name for any snapshot.
func TestExportPod(t *testing.T) {
	snap := &vmv1.VirtualMachineSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "db-monday", UID: "u1"}}
	p := exportPod(snap, "db-monday-root", "example.org/runner:v1", "0a1b2")
	ps, c := p.Spec.SecurityContext, p.Spec.Containers[0]
	cs := c.SecurityContext
	switch {
	case p.Name != "db-monday-export-0a1b2" || p.Namespace != "prod":
		t.Errorf("name %s/%s", p.Namespace, p.Name)
	case !*ps.RunAsNonRoot || *ps.RunAsUser != vmv1.RunnerUID || *ps.RunAsGroup != vmv1.RunnerGID || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("pod security context %+v", ps)
	case *cs.Privileged || *cs.AllowPrivilegeEscalation || !*cs.ReadOnlyRootFilesystem || !*cs.RunAsNonRoot || len(cs.Capabilities.Drop) != 1 || cs.Capabilities.Drop[0] != "ALL":
		t.Errorf("container security context %+v", cs)
	case !c.Stdin || c.Command[0] != "/bin/sh" || c.Image != "example.org/runner:v1" || c.VolumeMounts[0].MountPath != exportMount || !c.VolumeMounts[0].ReadOnly:
		t.Errorf("container %+v", c)
	case *p.Spec.AutomountServiceAccountToken || p.Spec.RestartPolicy != corev1.RestartPolicyNever || *p.Spec.ActiveDeadlineSeconds != 12*3600:
		t.Errorf("pod spec %+v", p.Spec)
	case p.OwnerReferences[0].UID != "u1" || p.OwnerReferences[0].Controller != nil:
		t.Errorf("owners %+v", p.OwnerReferences)
	}
	for k, v := range p.Labels {
		if strings.HasPrefix(k, vmv1.ReservedKeyPrefix) || k == vmv1.LabelManagedBy && v == vmv1.ManagedBy {
			t.Errorf("reserved label %s=%s", k, v)
		}
	}
	if got := exportRead; got[1] != "/virtpod/export/disk.img" {
		t.Errorf("reads %v", got)
	}
	long := strings.Repeat("a", 240) + "." + strings.Repeat("b", 12)
	if n := exportPodName(long, "0a1b2"); len(n) > 253 || strings.Contains(n, ".-") || !strings.HasSuffix(n, "-export-0a1b2") {
		t.Errorf("name of a long snapshot: %q (%d)", n, len(n))
	}
}
