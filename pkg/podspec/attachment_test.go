package podspec_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
	goldenfile "github.com/virtpod/virtpod/tests/golden"
)

// attachmentCase is the VM of withDisks, its runner pod on node-a, and an attachment of disk.
func attachmentCase(disk string) (podspec.Attachment, *corev1.Pod) {
	vm, opts := baseVM(), podspec.DefaultOptions()
	withDisks(vm)
	opts.Claims = claims()
	runner := podspec.Build(vm, opts)
	runner.UID, runner.Spec.NodeName = "7f3c2b1a-aaaa-bbbb-cccc-ddddeeeeffff", "node-a"
	a := podspec.Attachment{VM: vm, Runner: runner, Image: "localhost/virtpod/runner:dev"}
	for _, d := range vm.Spec.Guest.Disks {
		if d.Name == disk {
			a.Disk = d
		}
	}
	if c := a.Disk.PersistentVolumeClaim; c != nil {
		a.Claim = opts.Claims[c.ClaimName]
	}
	return a, runner
}

// TestAttachmentPodGolden: an attachment pod for each source a hotplugged disk may have.
func TestAttachmentPodGolden(t *testing.T) {
	for _, disk := range []string{"data", "raw", "shared", "scratch", "config", "creds"} {
		t.Run(disk, func(t *testing.T) {
			a, _ := attachmentCase(disk)
			got, err := yaml.Marshal(podspec.AttachmentPod(a))
			if err != nil {
				t.Fatal(err)
			}
			goldenfile.Check(t, "attachment-"+disk+".golden.yaml", got)
		})
	}
}

// TestAttachmentPodAgrees: the attachment pod is restricted, of its VM, on the runner's node,
// for its UID, and reads its disk as the runner pod does: the same volume at the same place and
// the same --disk, but for what only the runner uses (migrate=, slot=).
func TestAttachmentPodAgrees(t *testing.T) {
	for _, disk := range []string{"data", "raw", "shared", "scratch", "config", "creds"} {
		t.Run(disk, func(t *testing.T) {
			a, runner := attachmentCase(disk)
			pod := podspec.AttachmentPod(a)
			checkUnprivileged(t, pod)
			if pod.Name != "web-hp-"+disk || pod.Namespace != "team-a" {
				t.Errorf("pod %s/%s", pod.Namespace, pod.Name)
			}
			for k, v := range map[string]string{vmv1.LabelManagedBy: vmv1.ManagedBy, podspec.LabelVMName: "web", vmv1.LabelAttachmentOf: "web",
				vmv1.LabelAttachedDisk: disk, vmv1.LabelAttachedTo: string(runner.UID)} {
				if pod.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, pod.Labels[k], v)
				}
			}
			if _, ok := pod.Labels[vmv1.LabelCopierOf]; ok {
				t.Errorf("a copier label: %v", pod.Labels)
			}
			if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != a.VM.UID || ref.Kind != "VirtualMachine" {
				t.Errorf("controller %+v, want the VM", ref)
			}
			terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			if len(terms) != 1 || terms[0].MatchFields[0].Values[0] != "node-a" {
				t.Errorf("node affinity %+v, want node-a", terms)
			}
			c := pod.Spec.Containers[0]
			if c.Name != vmv1.AttachmentContainer || c.Resources.Limits[vmv1.ResourceControl] != c.Resources.Requests[vmv1.ResourceControl] || c.Resources.Limits.Name(vmv1.ResourceControl, "").Value() != 1 {
				t.Errorf("container %s, resources %v", c.Name, c.Resources)
			}
			checkSameDisk(t, pod, runner, disk)
		})
	}
}

// checkSameDisk: the pods' --disk of disk, its volume and its mount or device agree.
func checkSameDisk(t *testing.T, pod, runner *corev1.Pod, disk string) {
	t.Helper()
	args := pod.Spec.Containers[0].Args
	if args[0] != "disk-serve" || args[1] != "--control-dir="+vmv1.ControlDir {
		t.Fatalf("args %q", args)
	}
	got, err := runnerconfig.ParseDisk(strings.TrimPrefix(args[2], "--disk="))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := runnerconfigtest.Parse(runner.Spec.Containers[0].Args)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range cfg.Disks {
		if want.Name == disk {
			want.Migrate, want.Hotplug, want.Slot = "", false, 0
			if got != want {
				t.Errorf("--disk %+v, the runner's %+v", got, want)
			}
		}
	}
	vol := "disk-" + disk
	if !sameVolume(pod, runner, vol) {
		t.Errorf("volume %s differs from the runner pod's", vol)
	}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.Name == vol && !containsMount(runner.Spec.Containers[0].VolumeMounts, m) {
			t.Errorf("mount %+v is not the runner's", m)
		}
	}
	for _, d := range pod.Spec.Containers[0].VolumeDevices {
		if !containsDevice(runner.Spec.Containers[0].VolumeDevices, d) {
			t.Errorf("device %+v is not the runner's", d)
		}
	}
}

func sameVolume(a, b *corev1.Pod, name string) bool {
	find := func(p *corev1.Pod) string {
		for _, v := range p.Spec.Volumes {
			if v.Name == name {
				y, _ := yaml.Marshal(v)
				return string(y)
			}
		}
		return "missing"
	}
	return find(a) != "missing" && find(a) == find(b)
}

func containsMount(ms []corev1.VolumeMount, m corev1.VolumeMount) bool {
	return slices.ContainsFunc(ms, func(x corev1.VolumeMount) bool { return reflect.DeepEqual(x, m) })
}

func containsDevice(ds []corev1.VolumeDevice, d corev1.VolumeDevice) bool {
	return slices.Contains(ds, d)
}

// TestAttachmentPodNone: an image disk has no attachment pod.
func TestAttachmentPodNone(t *testing.T) {
	a, _ := attachmentCase("tools")
	if pod := podspec.AttachmentPod(a); pod != nil {
		t.Errorf("an attachment pod for an image disk: %s", pod.Name)
	}
	a.Disk = vmv1.Disk{Name: "nothing"}
	if pod := podspec.AttachmentPod(a); pod != nil {
		t.Errorf("an attachment pod for a disk without a source: %s", pod.Name)
	}
}

func TestAttachmentPodName(t *testing.T) {
	if n := podspec.AttachmentPodName("web", "logs"); n != "web-hp-logs" {
		t.Errorf("%s, want web-hp-logs", n)
	}
	long := strings.Repeat("v", 250)
	a, b := podspec.AttachmentPodName(long, "logs"), podspec.AttachmentPodName(long, "data")
	if len(a) > 253 || a == b || a != podspec.AttachmentPodName(long, "logs") {
		t.Errorf("long names: %q, %q: want distinct, deterministic, at most 253 characters", a, b)
	}
}
