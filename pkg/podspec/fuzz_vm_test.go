package podspec_test

import (
	"encoding/json"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// vmInput is FuzzRender's input. Strings go into the VM as they are; lists and maps are
// written one entry a line:
//
//	labels, nodeSelector: KEY=VALUE (cut at the first '=')
//	ports:                PORT[/PROTOCOL] NAME (the name is the rest of the line)
//	tolerations:          KEY|OPERATOR|VALUE|EFFECT|SECONDS (SECONDS empty: none)
//	cloudInit:            SECRET|USERDATAKEY|NETWORKDATAKEY (empty: no cloud-init)
//
// affinity and podResources are JSON; memory, diskSize and grace are quantities or numbers,
// and empty means unset where the field is optional.
type vmInput struct {
	name, labels                                      string
	cloudHypervisor, emulated                         bool
	cpus                                              int32
	memory, kernelImage, diskImage, diskSize          string
	runnerImage, kernelArgs, ports                    string
	nodeSelector, tolerations, affinity, podResources string
	grace, cloudInit                                  string
}

// decode returns the VM, or false when the input does not follow the encoding above (not when
// the VM is invalid: the API server decides that).
func (in vmInput) decode() (*vmv1.VirtualMachine, bool) {
	vm := &vmv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: in.name},
		Spec: vmv1.VirtualMachineSpec{
			Provider:     vmv1.ProviderQEMU,
			Acceleration: vmv1.AccelerationKVM,
			RunnerImage:  in.runnerImage,
			Guest: vmv1.GuestSpec{
				CPUs: in.cpus, KernelImage: in.kernelImage, KernelArgs: in.kernelArgs,
				RootDisk: vmv1.RootDisk{Image: in.diskImage},
			},
		},
	}
	// The controller writes a provider into every VM before it renders a pod.
	if in.cloudHypervisor {
		vm.Spec.Provider = vmv1.ProviderCloudHypervisor
	}
	if in.emulated {
		vm.Spec.Acceleration = vmv1.AccelerationEmulated
	}
	var err error
	if vm.Spec.Guest.Memory, err = resource.ParseQuantity(in.memory); err != nil {
		return nil, false
	}
	if in.diskSize != "" {
		q, err := resource.ParseQuantity(in.diskSize)
		if err != nil {
			return nil, false
		}
		vm.Spec.Guest.RootDisk.Size = &q
	}
	if in.grace != "" {
		g, err := strconv.ParseInt(in.grace, 10, 64)
		if err != nil {
			return nil, false
		}
		vm.Spec.TerminationGracePeriodSeconds = &g
	}
	var ok bool
	if vm.Labels, ok = decodeMap(in.labels); !ok {
		return nil, false
	}
	if vm.Spec.NodeSelector, ok = decodeMap(in.nodeSelector); !ok {
		return nil, false
	}
	if vm.Spec.Guest.Ports, ok = decodePorts(in.ports); !ok {
		return nil, false
	}
	if vm.Spec.Tolerations, ok = decodeTolerations(in.tolerations); !ok {
		return nil, false
	}
	if in.affinity != "" {
		vm.Spec.Affinity = &corev1.Affinity{}
		if json.Unmarshal([]byte(in.affinity), vm.Spec.Affinity) != nil {
			return nil, false
		}
	}
	if in.cloudInit != "" {
		f := strings.Split(in.cloudInit, "|")
		if len(f) != 3 {
			return nil, false
		}
		vm.Spec.Guest.CloudInit = &vmv1.CloudInit{SecretRef: vmv1.SecretReference{Name: f[0]}, UserDataKey: f[1], NetworkDataKey: f[2]}
	}
	if in.podResources != "" {
		vm.Spec.PodResources = &corev1.ResourceRequirements{}
		if json.Unmarshal([]byte(in.podResources), vm.Spec.PodResources) != nil {
			return nil, false
		}
	}
	return vm, true
}

func decodeMap(text string) (map[string]string, bool) {
	if text == "" {
		return nil, true
	}
	m := map[string]string{}
	for line := range strings.Lines(text) {
		k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		if !ok {
			return nil, false
		}
		m[k] = v
	}
	return m, true
}

func decodePorts(text string) ([]vmv1.Port, bool) {
	var ports []vmv1.Port
	for line := range strings.Lines(text) {
		head, name, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		if !ok {
			return nil, false
		}
		num, proto, _ := strings.Cut(head, "/")
		n, err := strconv.ParseInt(num, 10, 32)
		if err != nil {
			return nil, false
		}
		ports = append(ports, vmv1.Port{Name: name, Port: int32(n), Protocol: corev1.Protocol(proto)})
	}
	return ports, true
}

func decodeTolerations(text string) ([]corev1.Toleration, bool) {
	var tols []corev1.Toleration
	for line := range strings.Lines(text) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), "|")
		if len(f) != 5 {
			return nil, false
		}
		t := corev1.Toleration{Key: f[0], Operator: corev1.TolerationOperator(f[1]), Value: f[2], Effect: corev1.TaintEffect(f[3])}
		if f[4] != "" {
			s, err := strconv.ParseInt(f[4], 10, 64)
			if err != nil {
				return nil, false
			}
			t.TolerationSeconds = &s
		}
		tols = append(tols, t)
	}
	return tols, true
}
