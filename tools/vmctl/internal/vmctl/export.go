package vmctl

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// Export. A snapshot's disk is a raw, sparse disk.img on its claim. vmctl makes a pod
// <snapshot>-export-<5 hex> that mounts the claim read-only and idles, runs cat of the file in it
// through the API server's pod exec (as vmctl console runs virtpod-runner console), writes what
// comes into the local file, leaving a hole for every 64 KiB block of zeros, and deletes the pod.
const (
	exportMount     = "/virtpod/export"
	exportContainer = "export"
	// defaultRunnerImage is the export pod's image when neither the VM's runner pod nor its
	// status names one.
	defaultRunnerImage = "virtpod/runner:latest"
	// exportPodDeadline ends an export pod vmctl could not delete (killed, or its connection
	// lost) by itself: longer than any export should take.
	exportPodDeadline = 12 * time.Hour
	// exportStartWait is --timeout's default: how long the export pod may take to run.
	exportStartWait = 5 * time.Minute
	// sparseBlock is the unit sparseWriter leaves out when it is all zeros.
	sparseBlock = 64 << 10
)

// exportIdle keeps the export pod's container up, doing nothing, until the pod is deleted: the
// shell waits for a line on its standard input, which the container keeps open (stdin: true) and
// nothing writes. The runner image has /bin/sh and /bin/cat (Debian's in Dockerfile.runner,
// busybox's in imagebuild's runner image) but no virtpod-runner program that idles or serves a
// file; one could replace both commands here.
var exportIdle = []string{"/bin/sh", "-c", "read -r _"}

// exportRead is what vmctl runs in the export pod: the disk file, whole, on stdout.
var exportRead = []string{"/bin/cat", exportMount + "/" + runnerconfig.DiskFileName}

func (a *app) exportCmd() *cobra.Command {
	var out, image string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "export SNAPSHOT DISK -o FILE",
		Short: "Copy a snapshot's disk to a local raw disk image, sparse",
		Long: `Copy DISK (root, or a data disk's name; see status.disks or vmctl snapshots) of a Succeeded
snapshot to FILE, a raw disk image of the disk's size. Every 64 KiB block of zeros is left a hole
in FILE, so it takes only the space the data takes (on a file system with sparse files). FILE is
written as FILE.partial and renamed when complete; -o - writes the image to stdout instead.

How: vmctl creates a pod <SNAPSHOT>-export-<5 hex digits> in the namespace that mounts the
snapshot's claim read-only and idles (the runner image of the VM's runner pod, else of the VM's
status, else --image; Pod Security restricted, owned by the snapshot), waits until it runs
(--timeout), reads the disk file through the API server's pod exec, and deletes the pod at the
end, also on Ctrl-C. It needs pods create, get and delete and pods/exec create in the namespace.

Exit codes: 0 exported, 1 failed (the snapshot is missing, not Succeeded or has no such disk,
the API server refused the pod, the pod cannot run, the copy broke off), 2 wrong command line, 4
--timeout passed before the export pod ran (it is deleted).`,
		Example:           "  vmctl export db-monday root -o db-root.img\n  vmctl export db-monday data -o - | zstd > data.img.zst",
		Args:              exactArgs(2),
		ValidArgsFunction: a.completeSnapshots(""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return usageError{errors.New("-o FILE is required (- for stdout)")}
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return a.export(ctx, args[0], args[1], out, image, cmd.Flags().Changed("image"), timeout)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the local file to write the raw disk image to (- for stdout)")
	cmd.Flags().StringVar(&image, "image", defaultRunnerImage, "the export pod's image when the VM names no runner image (it needs /bin/sh and /bin/cat)")
	cmd.Flags().DurationVar(&timeout, "timeout", exportStartWait, "how long the export pod may take to run (exit code 4 when it does not; it is deleted)")
	return cmd
}

func (a *app) export(ctx context.Context, snapName, disk, out, image string, imageSet bool, timeout time.Duration) (err error) {
	o, err := a.snapConnect()
	if err != nil {
		return err
	}
	snap, err := o.snapshot(snapName)
	if err != nil {
		return err
	}
	if snap.Status.Phase != vmv1.SnapshotSucceeded {
		return fmt.Errorf("snapshot %s is %s (%s): only a Succeeded snapshot can be exported", o.ref(snapName), orNew(snap.Status.Phase), readyWhy(snap.Status.Conditions))
	}
	var d *vmv1.SnapshotDisk
	var names []string
	for i := range snap.Status.Disks {
		names = append(names, snap.Status.Disks[i].Disk)
		if snap.Status.Disks[i].Disk == disk {
			d = &snap.Status.Disks[i]
		}
	}
	if d == nil {
		return fmt.Errorf("snapshot %s has no disk %q: its disks are %s", o.ref(snapName), disk, strings.Join(names, ", "))
	}
	if !imageSet {
		image = o.runnerImage(snap.Spec.VMName, image)
	}

	// The local file first: a path that cannot be written fails before any pod is made.
	var w interface {
		io.Writer
		Close() error
	}
	var file *os.File
	if out == "-" {
		w = &plainWriter{w: a.stdout}
	} else {
		if file, err = os.OpenFile(out+".partial", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644); err != nil {
			return err
		}
		defer func() {
			if err != nil {
				file.Close()
				os.Remove(file.Name())
			}
		}()
		w = newSparseWriter(file)
	}

	suffix, err := randomHex(5)
	if err != nil {
		return err
	}
	pod := exportPod(snap, d.ClaimName, image, suffix)
	cctx, cancel := context.WithTimeout(ctx, apiTimeout)
	pod, err = o.cn.cs.CoreV1().Pods(o.cn.ns).Create(cctx, pod, metav1.CreateOptions{FieldManager: fieldManager})
	cancel()
	if err != nil {
		return fmt.Errorf("creating export pod for snapshot %s: %w", o.ref(snapName), err)
	}
	defer o.deleteExportPod(pod)
	fmt.Fprintf(a.stderr, "Exporting disk %s of snapshot %s (%s) through pod %s, image %s.\n", disk, o.ref(snapName), bytesIEC(float64(d.SizeBytes)), pod.Name, image)
	if err := o.awaitExportPod(ctx, pod, a.now().Add(timeout), timeout); err != nil {
		return err
	}

	progress := &counter{}
	stopProgress := a.showProgress(progress, d.SizeBytes)
	var errBuf bytes.Buffer
	exec, err := executor(o.cn.cfg, o.cn.cs.CoreV1().RESTClient().Post().Namespace(pod.Namespace).Resource("pods").Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: exportContainer, Command: exportRead, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL())
	if err == nil {
		err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.MultiWriter(w, progress), Stderr: &errBuf})
	}
	stopProgress()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("export of disk %s of snapshot %s interrupted: %s not written; the export pod is deleted", disk, o.ref(snapName), out)
	case err != nil:
		if msg := strings.TrimSpace(errBuf.String()); msg != "" {
			return fmt.Errorf("export of disk %s of snapshot %s: %s", disk, o.ref(snapName), oneLine(msg))
		}
		return fmt.Errorf("export of disk %s of snapshot %s: %s", disk, o.ref(snapName), oneLine(err.Error()))
	}
	if err = w.Close(); err != nil {
		return err
	}
	if file == nil {
		fmt.Fprintf(a.stderr, "Exported disk %s of snapshot %s: %s.\n", disk, o.ref(snapName), bytesIEC(float64(progress.n.Load())))
		return nil
	}
	if err = file.Sync(); err != nil {
		return err
	}
	if err = file.Close(); err != nil {
		return err
	}
	if err = os.Rename(file.Name(), out); err != nil {
		return err
	}
	sw := w.(*sparseWriter)
	fmt.Fprintf(a.stderr, "Exported disk %s of snapshot %s to %s: %s, %s of data and %s of holes.\n",
		disk, o.ref(snapName), out, bytesIEC(float64(sw.pos)), bytesIEC(float64(sw.data)), bytesIEC(float64(sw.holes)))
	return nil
}

// runnerImage is the runner image of the VM's runner pod, else of its status, else def: the
// image the snapshot's copier ran, most likely.
func (o *snapOp) runnerImage(vmName, def string) string {
	vm, err := o.vm(vmName)
	if err != nil || vm == nil {
		return def
	}
	if vm.Status.PodName != "" {
		ctx, cancel := o.a.ctx()
		pod, err := o.cn.cs.CoreV1().Pods(o.cn.ns).Get(ctx, vm.Status.PodName, metav1.GetOptions{})
		cancel()
		if err == nil {
			if img := podspec.PodImages(pod).Runner; img != "" {
				return img
			}
		}
	}
	if vm.Status.Images != nil && vm.Status.Images.Runner != "" {
		return vm.Status.Images.Runner
	}
	return def
}

// exportPodName is <snapshot>-export-<suffix>, the snapshot's name cut to fit a pod name.
func exportPodName(snapshot, suffix string) string {
	const tail = "-export-"
	if max := 253 - len(tail) - len(suffix); len(snapshot) > max {
		snapshot = strings.TrimRight(snapshot[:max], "-.")
	}
	return snapshot + tail + suffix
}

// exportPod renders the export pod: the snapshot's claim read-only at exportMount, a container
// that idles, at Pod Security restricted in the shape of a copier pod (pkg/podspec.CopierPod),
// owned by the snapshot (not as its controller) so it goes with it. It carries none of virtpod's
// reserved labels, which only the controller may set. Pure.
func exportPod(snap *vmv1.VirtualMachineSnapshot, claim, image, suffix string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      exportPodName(snap.Name, suffix),
			Namespace: snap.Namespace,
			Labels:    map[string]string{"app.kubernetes.io/managed-by": fieldManager, "app.kubernetes.io/component": "snapshot-export"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: vmv1.GroupVersion.String(), Kind: "VirtualMachineSnapshot",
				Name: snap.Name, UID: snap.UID}},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			ActiveDeadlineSeconds:         ptr.To(int64(exportPodDeadline / time.Second)),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:        ptr.To(true),
				RunAsUser:           ptr.To(vmv1.RunnerUID),
				RunAsGroup:          ptr.To(vmv1.RunnerGID),
				FSGroup:             ptr.To(vmv1.RunnerGID),
				FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
				SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:    exportContainer,
				Image:   image,
				Command: exportIdle,
				Stdin:   true,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				SecurityContext: &corev1.SecurityContext{
					Privileged:               ptr.To(false),
					RunAsNonRoot:             ptr.To(true),
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "disk", MountPath: exportMount, ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "disk", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: true}}}},
		},
	}
}

// awaitExportPod waits until the export pod's container runs; a pod that never will (its image
// cannot be pulled, it ended) fails at once, one still pending past deadline is exit 4.
func (o *snapOp) awaitExportPod(ctx context.Context, pod *corev1.Pod, deadline time.Time, timeout time.Duration) error {
	for {
		gctx, cancel := context.WithTimeout(ctx, apiTimeout)
		p, err := o.cn.cs.CoreV1().Pods(pod.Namespace).Get(gctx, pod.Name, metav1.GetOptions{})
		cancel()
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("export interrupted before pod %s ran; it is deleted", pod.Name)
		case apierrors.IsNotFound(err):
			return fmt.Errorf("export pod %s was deleted before it ran", pod.Name)
		case err != nil:
			return fmt.Errorf("reading export pod %s: %w", pod.Name, err)
		}
		running, fatal, pending := exportPodState(p)
		switch {
		case running:
			return nil
		case fatal != "":
			return fmt.Errorf("export pod %s cannot run: %s", pod.Name, fatal)
		case !o.a.now().Before(deadline):
			fmt.Fprintf(o.a.stderr, "error: export pod %s is not running after %s: %s; it is deleted\n", pod.Name, timeout, pending)
			return exitError{code: exitTimedOut}
		}
		select {
		case <-ctx.Done():
		case <-time.After(pollEvery):
		}
	}
}

// exportPodState says whether the export container runs; if not, why it never will (fatal) or
// what it waits for (pending).
func exportPodState(p *corev1.Pod) (running bool, fatal, pending string) {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		why := p.Status.Message
		for _, s := range p.Status.ContainerStatuses {
			if t := s.State.Terminated; t != nil {
				why = fmt.Sprintf("exit code %d (%s) %s", t.ExitCode, t.Reason, oneLine(t.Message))
			}
		}
		return false, fmt.Sprintf("it ended (%s): %s", p.Status.Phase, strings.TrimSpace(why)), ""
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.Name != exportContainer {
			continue
		}
		switch {
		case s.State.Running != nil:
			return p.Status.Phase == corev1.PodRunning, "", "its container runs, the pod is " + string(p.Status.Phase)
		case s.State.Terminated != nil:
			t := s.State.Terminated
			return false, fmt.Sprintf("its container ended: exit code %d (%s) %s", t.ExitCode, t.Reason, oneLine(t.Message)), ""
		case s.State.Waiting != nil:
			w := s.State.Waiting
			switch w.Reason {
			case "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName":
				return false, fmt.Sprintf("%s: %s (image %s: --image names another)", w.Reason, oneLine(w.Message), s.Image), ""
			case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
				return false, w.Reason + ": " + oneLine(w.Message), ""
			}
			return false, "", fmt.Sprintf("its container is waiting (%s) %s", w.Reason, oneLine(w.Message))
		}
	}
	pending = "it is " + string(p.Status.Phase)
	if p.Spec.NodeName == "" {
		why := ", not scheduled yet"
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
				why = fmt.Sprintf(", not scheduled (%s): %s", c.Reason, oneLine(c.Message))
			}
		}
		pending += why
	} else {
		pending += " on node " + p.Spec.NodeName
	}
	return false, "", pending
}

// deleteExportPod deletes the export pod; when it cannot, it says how to.
func (o *snapOp) deleteExportPod(pod *corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	err := o.cn.cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		fmt.Fprintf(o.a.stderr, "warning: the export pod %s is left: %s; delete it: kubectl delete pod %s -n %s\n", pod.Name, oneLine(err.Error()), pod.Name, pod.Namespace)
	}
}

// showProgress writes, while stderr is a terminal, how much has come of total, once a second;
// the function it returns stops it.
func (a *app) showProgress(c *counter, total int64) func() {
	f, ok := a.stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return func() {}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(f, "\r\033[K")
				return
			case <-t.C:
				fmt.Fprintf(f, "\r\033[K%s of %s", bytesIEC(float64(c.n.Load())), bytesIEC(float64(total)))
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// counter counts the bytes written through it.
type counter struct{ n atomic.Int64 }

func (c *counter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// plainWriter is export's writer for stdout: no holes there.
type plainWriter struct{ w io.Writer }

func (p *plainWriter) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p *plainWriter) Close() error                { return nil }

func randomHex(n int) (string, error) {
	b := make([]byte, (n+1)/2)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b)[:n], nil
}

// sparseFile is what a sparseWriter writes into: a new, empty *os.File.
type sparseFile interface {
	io.WriterAt
	Truncate(size int64) error
}

// sparseWriter writes a stream into a new file in blocks of sparseBlock bytes, aligned from the
// file's start, and skips every block that is all zeros: the file gets a hole there instead.
// Close writes the last, short block and sets the file's size, so trailing zeros are a hole
// too. The file must start empty: only there do the skipped blocks read as zeros.
type sparseWriter struct {
	f           sparseFile
	buf         []byte // the block being filled; shorter than sparseBlock between writes
	pos         int64  // the file offset of buf's start
	data, holes int64  // bytes written, bytes left as holes
}

func newSparseWriter(f sparseFile) *sparseWriter {
	return &sparseWriter{f: f, buf: make([]byte, 0, sparseBlock)}
}

func (w *sparseWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(w.buf) == 0 && len(p) >= sparseBlock {
			if err := w.block(p[:sparseBlock]); err != nil {
				return n - len(p), err
			}
			p = p[sparseBlock:]
			continue
		}
		k := min(sparseBlock-len(w.buf), len(p))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == sparseBlock {
			if err := w.block(w.buf); err != nil {
				return n - len(p), err
			}
			w.buf = w.buf[:0]
		}
	}
	return n, nil
}

func (w *sparseWriter) block(b []byte) error {
	if bytes.Equal(b, zeroBlock[:len(b)]) {
		w.holes += int64(len(b))
	} else {
		if _, err := w.f.WriteAt(b, w.pos); err != nil {
			return err
		}
		w.data += int64(len(b))
	}
	w.pos += int64(len(b))
	return nil
}

// Close writes the last block and sets the file's size to all that was written.
func (w *sparseWriter) Close() error {
	if len(w.buf) > 0 {
		if err := w.block(w.buf); err != nil {
			return err
		}
		w.buf = w.buf[:0]
	}
	return w.f.Truncate(w.pos)
}

var zeroBlock = make([]byte, sparseBlock)
