package v1alpha1

import "fmt"

// NetworkMode is how the guest is connected to its pod's network: spec.guest.networkMode, and
// the runner's --network flag, which spells the same modes in lower case (Flag,
// ParseNetworkFlag).
// +kubebuilder:validation:Enum=Pod;Masquerade
type NetworkMode string

// Network modes.
const (
	// NetworkPod: the guest takes over the pod's interface and IP (the default). It cannot
	// migrate: the pod IP changes with the pod.
	NetworkPod NetworkMode = "Pod"
	// NetworkMasquerade: the guest keeps a fixed address inside the pod (10.0.2.2/24) and the
	// runner forwards the pod IP's traffic to it, so its configuration survives a migration.
	NetworkMasquerade NetworkMode = "Masquerade"
	// NetworkNone: the guest has no network. The runner's alone (--network=none, for its
	// tests and runs outside a cluster), so it is kept out of the Enum marker above: the API
	// server refuses it in spec.guest.networkMode, because a VirtualMachine's guest is reached
	// through its pod (its ports, its readiness probe), and the controller never renders it.
	NetworkNone NetworkMode = "None"
)

// networkFlags are the modes as the runner's --network flag spells them. The spelling is
// a contract: runner pods of an earlier release, whose flags the node agent reads, keep
// theirs.
var networkFlags = []struct {
	mode NetworkMode
	flag string
}{
	{NetworkPod, "pod"},
	{NetworkMasquerade, "masquerade"},
	{NetworkNone, "none"},
}

// Flag is the mode as the runner's --network flag spells it: pod, masquerade or none. Any
// other mode is returned unchanged (runnerconfig's Validate refuses it).
func (m NetworkMode) Flag() string {
	for _, f := range networkFlags {
		if f.mode == m {
			return f.flag
		}
	}
	return string(m)
}

// ParseNetworkFlag reads a --network flag's value: pod, masquerade or none, exactly.
func ParseNetworkFlag(s string) (NetworkMode, error) {
	for _, f := range networkFlags {
		if f.flag == s {
			return f.mode, nil
		}
	}
	return "", fmt.Errorf("%q is not a network mode; use pod, masquerade or none", s)
}
