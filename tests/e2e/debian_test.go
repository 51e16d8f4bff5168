package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/podspec"
)

// debianImage is the Debian cloud guest as a VM image in KubeVirt's containerDisk layout (one
// qcow2 under /disk/, no kernel): make image-debian-guest.
const debianImage = "localhost/virtpod/debian:dev"

// debianBoot bounds a TCG boot of the Debian guest in the cluster to its readiness probe:
// firmware, systemd, cloud-init's four stages (Python, emulated) and the user-data's service.
const debianBoot = 10 * time.Minute

// cloudGuestChecks checks on a running VM what a user of a stock-style cloud image sees of it:
// booted through its own bootloader and firmware (no kernelImage), its network leased by the
// runner's DHCP, cloud-init's user-data (here Cluster API's kubeadm bootstrap, with a user whose
// SSH key is in Secret keySecret and an HTTP service on port 8080 that serves want) run to its end
// and the VM Ready once its readiness probe (that service) passes; another pod fetches the
// service at the VM's IP and logs in over SSH with the key; vmctl ssh logs in through the API
// server's port-forward; and qemu-guest-agent puts the OS, hostname and addresses into the VM's
// status. The node image is the Debian cloud guest plus Kubernetes' node programs, so its
// workers carry these checks and no guest boots for them alone.
func cloudGuestChecks(t *testing.T, ns, name, keySecret string, priv []byte, want string) {
	t.Helper()
	eventually(t, "the VM Ready: its readiness probe passes", debianBoot, func() error {
		c := meta.FindStatusCondition(getVM(t, ns, name).Status.Conditions, vmv1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready: %+v", c)
		}
		return nil
	})
	vm := getVM(t, ns, name)
	// The runner leased the pod IP to the guest by DHCP, and cloud-init ran to its end.
	if err := contains(podLogs(ns, podspec.PodName(name)), `"msg":"dhcp answer"`, `"type":"ACK"`, `"ip":"`+vm.Status.PodIP+`"`, "Cloud-init v.", "finished at"); err != nil {
		t.Fatal(err)
	}

	// Another pod reaches the user-data's service at the VM's IP.
	if err := contains(fetchFrom(t, ns, vm.Status.PodIP, 8080), want); err != nil {
		t.Fatal(err)
	}
	// Another pod logs in over SSH with the key cloud-init installed and runs a command.
	out := sshFrom(t, ns, keySecret, vm.Status.PodIP, "tester", "echo user=$(id -un) host=$(hostname)")
	if err := contains(out, "user=tester host="+name); err != nil {
		t.Fatalf("ssh from a pod: %v", err)
	}
	// vmctl ssh: the host's OpenSSH client through the API server's port-forward.
	t.Run("vmctl ssh", func(t *testing.T) {
		vmctl := filepath.Join(installVmctl(t), "vmctl")
		key := filepath.Join(t.TempDir(), "id")
		if err := os.WriteFile(key, priv, 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(vmctl, "-n", ns, "ssh", name, "--user", "tester", "--",
			"-i", key, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "uname -n")
		b, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(b), name) {
			t.Fatalf("vmctl ssh: %v\n%s", err, b)
		}
	})

	// qemu-guest-agent (started by udev on its channel) says what runs inside: the VM's status
	// shows Debian 12, the hostname and the pod IP the guest leased.
	eventually(t, "AgentConnected, and the guest's facts in status.guest", 2*time.Minute, func() error {
		got := getVM(t, ns, name)
		c, g := meta.FindStatusCondition(got.Status.Conditions, vmv1.ConditionAgentConnected), got.Status.Guest
		if c == nil || c.Status != metav1.ConditionTrue || g == nil || g.OS == nil {
			return fmt.Errorf("AgentConnected %+v, guest %+v", c, g)
		}
		if g.OS.ID != "debian" || g.OS.VersionID != "12" || g.OS.KernelRelease == "" || g.Hostname != name ||
			!slices.ContainsFunc(g.Interfaces, func(i vmv1.GuestInterface) bool {
				return slices.ContainsFunc(i.IPs, func(ip string) bool { return strings.HasPrefix(ip, got.Status.PodIP+"/") })
			}) {
			return fmt.Errorf("guest %+v, os %+v; want debian 12, hostname %s and the pod IP %s", g, g.OS, name, got.Status.PodIP)
		}
		return nil
	})
}

// poweredOffByAgent checks a deleted VM's console: the runner asked the guest agent to power the
// guest off, systemd did, within the grace period.
func poweredOffByAgent(t *testing.T, console string) {
	t.Helper()
	if err := contains(console, "asked the guest agent to power the guest off", "Power Off", "reboot: Power down"); err != nil {
		t.Fatalf("the guest did not power off through its agent and systemd: %v", err)
	}
	if strings.Contains(console, "did not power off within the grace period") {
		t.Fatalf("the runner had to stop the hypervisor:\n%s", grepLines(console, "grace"))
	}
}

// debianVM is a VM of the Debian cloud guest: no kernel image, UEFI, emulated.
func debianVM(ns, name string) *vmv1.VirtualMachine {
	vm := newVM(ns, name)
	g := &vm.Spec.Guest
	g.KernelImage, g.Firmware = "", vmv1.FirmwareUEFI
	g.Memory = resource.MustParse("512Mi")
	g.RootDisk = vmv1.RootDisk{Image: debianImage}
	g.Ports = []vmv1.Port{{Name: "ssh", Port: 22}, {Name: "http", Port: 8080}}
	vm.Spec.TerminationGracePeriodSeconds = ptr.To[int64](120)
	vm.Spec.PodResources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
	return vm
}

func mustCreate(t testing.TB, obj client.Object) {
	t.Helper()
	if err := kube.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

// sshKey makes an ed25519 key pair: the public key as an authorized_keys line, the private key
// in OpenSSH's format.
func sshKey(t *testing.T) (string, []byte) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "virtpod e2e")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))), pem.EncodeToMemory(block)
}

// sshFrom runs a toolbox pod that logs in to ip:22 as user with the private key in Secret
// keySecret (key id), runs command, and returns what it printed.
func sshFrom(t *testing.T, ns, keySecret, ip, user, command string) string {
	t.Helper()
	return runPod(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ssh-client"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "ssh", Image: "localhost/virtpod/toolbox:dev",
				Command:      []string{"/bin/sshcheck", "-key", "/keys/id", "-user", user, ip + ":22", command},
				VolumeMounts: []corev1.VolumeMount{{Name: "keys", MountPath: "/keys", ReadOnly: true}}}},
			Volumes: []corev1.Volume{{Name: "keys", VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: keySecret, DefaultMode: ptr.To[int32](0o400)}}}},
		},
	})
}
