package podspec_test

import (
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
)

// checkPod checks what users and docs/security.md rely on in the runner pod of vm.
func checkPod(t *testing.T, vm *vmv1.VirtualMachine, pod *corev1.Pod) {
	t.Helper()
	if pod.Name != vm.Name+"-runner" || pod.Namespace != vm.Namespace {
		t.Fatalf("pod %s/%s for VM %s/%s, want %s-runner", pod.Namespace, pod.Name, vm.Namespace, vm.Name, vm.Name)
	}
	checkLabels(t, vm, pod.Labels)
	checkUnprivileged(t, pod)
	checkRunnerArgs(t, vm, runnerOf(pod))
}

// checkLabels: the VM's labels reach the pod, except that virtpod's own always win.
func checkLabels(t *testing.T, vm *vmv1.VirtualMachine, got map[string]string) {
	t.Helper()
	own := map[string]string{podspec.LabelVMName: vm.Name, podspec.LabelProvider: string(vm.Spec.Provider), vmv1.LabelManagedBy: vmv1.ManagedBy}
	want := map[string]string{}
	for k, v := range vm.Labels {
		want[k] = v
	}
	for k, v := range own {
		want[k] = v
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("pod labels %v, want %v (the VM's %v under virtpod's)", got, want, vm.Labels)
	}
}

// checkUnprivileged: the pod passes Pod Security restricted (the library the API server's
// admission runs), and beyond it no container is privileged, may escalate, writes its root or
// keeps any capability; no host namespace, no host path, no service account token.
func checkUnprivileged(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if bad := restrictedViolations(pod); bad != "" {
		t.Fatalf("the runner pod violates Pod Security restricted: %s", bad)
	}
	s := pod.Spec
	if s.HostNetwork || s.HostPID || s.HostIPC || s.HostUsers != nil && *s.HostUsers || s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
		t.Fatalf("the pod shares a host namespace or mounts a token: %+v", s)
	}
	for _, v := range s.Volumes {
		if v.HostPath != nil {
			t.Fatalf("hostPath volume %s", v.Name)
		}
	}
	if sc := s.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != vmv1.RunnerUID || sc.RunAsGroup == nil || *sc.RunAsGroup != vmv1.RunnerGID {
		t.Fatalf("the pod does not run as the runner's user %d:%d: %+v", vmv1.RunnerUID, vmv1.RunnerGID, sc)
	}
	for _, c := range slices.Concat(s.InitContainers, s.Containers) {
		sc := c.SecurityContext
		if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") ||
			len(sc.Capabilities.Add) > 0 || sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			t.Fatalf("container %s may be privileged: %+v", c.Name, sc)
		}
	}
}

// restrictedViolations is what Pod Security admission at level restricted (latest) would say
// of the pod, "" when it admits it.
func restrictedViolations(pod *corev1.Pod) string {
	var bad []string
	for _, r := range psaEvaluator.EvaluatePod(psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}, &pod.ObjectMeta, &pod.Spec) {
		if !r.Allowed {
			bad = append(bad, r.ForbiddenReason+" ("+r.ForbiddenDetail+")")
		}
	}
	return strings.Join(bad, "; ")
}

var psaEvaluator = func() psapolicy.Evaluator {
	e, err := psapolicy.NewEvaluator(psapolicy.DefaultChecks(), nil)
	if err != nil {
		panic(err)
	}
	return e
}()

// checkRunnerArgs: the runner reads back exactly the VM's configuration, and each user string
// (the VM's name, its kernel arguments, each port) is one whole argument: it adds none.
func checkRunnerArgs(t *testing.T, vm *vmv1.VirtualMachine, c *corev1.Container) {
	t.Helper()
	if !slices.Equal(c.Command, []string{podspec.RunnerBinary}) {
		t.Fatalf("runner command %q", c.Command)
	}
	got, err := runnerconfigtest.Parse(c.Args)
	if err != nil {
		t.Fatalf("the runner refuses its arguments %q: %v", c.Args, err)
	}
	want := podspec.RunnerConfig(vm)
	sort.SliceStable(want.Ports, func(i, j int) bool { return want.Ports[i].Name < want.Ports[j].Name })
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the runner reads\n%+v\nfrom %q, want\n%+v", got, c.Args, want)
	}
	g := vm.Spec.Guest
	if got.Name != vm.Name || got.KernelArgs != g.KernelArgs || len(got.Ports) != len(g.Ports) {
		t.Fatalf("the runner's name %q, kernel args %q or %d ports differ from the VM's", got.Name, got.KernelArgs, len(got.Ports))
	}
	single := map[string]string{"--name=": vm.Name}
	if g.KernelArgs != "" {
		single["--kernel-args="] = g.KernelArgs
	}
	for prefix, value := range single {
		if n := hasPrefixCount(c.Args, prefix); n != 1 || !slices.Contains(c.Args, prefix+value) {
			t.Fatalf("%d arguments start with %s, want exactly %q: %q", n, prefix, prefix+value, c.Args)
		}
	}
	if n := hasPrefixCount(c.Args, "--port="); n != len(g.Ports) {
		t.Fatalf("%d --port arguments for %d ports: %q", n, len(g.Ports), c.Args)
	}
}

// fuzzClass is an admin's ProviderClass that lets VMs pick runner images of one repository.
var fuzzClass = &vmv1.ProviderClass{Spec: vmv1.ProviderClassSpec{
	RunnerImage:         "registry.example.com/virtpod/runner:v1",
	AllowedRunnerImages: []string{"localhost/virtpod/runner"},
}}

// checkRunnerIsTheAdmins: what runs with the runner's privileges is the admin's choice, whatever
// the VM says. The runner image is the class's, the controller's or one the class allows; its
// command, security context and mounts, and the pod's security context, are those of a plain VM
// built with the same options; every volume is an image, an emptyDir or the cloud-init Secret.
func checkRunnerIsTheAdmins(t *testing.T, pod *corev1.Pod, opts podspec.Options) {
	t.Helper()
	r := runnerOf(pod)
	if r.Image != opts.RunnerImage && !opts.Class.Spec.AllowsRunnerImage(r.Image) {
		t.Fatalf("runner image %q is neither the controller's nor allowed by the ProviderClass", r.Image)
	}
	plain := &vmv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: "plain"},
		Spec: vmv1.VirtualMachineSpec{Guest: vmv1.GuestSpec{CPUs: 1, KernelImage: "k", RootDisk: vmv1.RootDisk{Image: "d"}}}}
	ref := podspec.Build(plain, opts)
	want := runnerOf(ref)
	if !slices.Equal(r.Command, want.Command) || !equality.Semantic.DeepEqual(r.SecurityContext, want.SecurityContext) ||
		!equality.Semantic.DeepEqual(pod.Spec.SecurityContext, ref.Spec.SecurityContext) {
		t.Fatalf("the VM changed the runner's command or security context:\n got %q %+v %+v\nwant %q %+v %+v",
			r.Command, r.SecurityContext, pod.Spec.SecurityContext, want.Command, want.SecurityContext, ref.Spec.SecurityContext)
	}
	mounts := map[string]string{}
	for _, m := range want.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	for _, m := range r.VolumeMounts {
		if p, ok := mounts[m.Name]; ok && p != m.MountPath || !ok && m.Name != podspec.CloudInitVolume {
			t.Fatalf("the VM changed the runner's mounts: %s at %s", m.Name, m.MountPath)
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.Image == nil && v.EmptyDir == nil && (v.Secret == nil || v.Name != podspec.CloudInitVolume) {
			t.Fatalf("volume %s is neither an image, an emptyDir nor the cloud-init Secret: %+v", v.Name, v.VolumeSource)
		}
	}
}
