// Package runner turns one VM's configuration into a running guest inside its pod: it checks
// the host, prepares the guest, wires it into the pod, starts the hypervisor as a child,
// supervises it, and ends with an exit code and a termination message that state the cause.
// This package only orchestrates (run.go is the list of steps, supervise.go the supervisor);
// each step's work is a package of its own, none of which imports this one:
//
//	runner/boot        what the guest boots from: kernel or firmware, root disk, data disks, seed
//	runner/podnet      the pod network: the handoff to the node agent, DHCP, IPv6, relay, probe
//	runner/virtiofs    the shares' virtiofsd processes
//	runner/live        the operations on a running guest and the control socket that serves them
//	runner/status      the guest's state and the read-only endpoints the kubelet probes
//	runner/console     the serial console: fan-out, history, clients, and the boot watch
//	runner/hypervisor  the neutral Machine and the interfaces each driver implements
//	runner/hypervisor/qemu, runner/hypervisor/cloudhypervisor  the drivers
//	runner/kvm         is KVM usable on this node, and why not
//	runner/binaries    the hypervisor programs and where the runner image has them
//
// A driver imports runner/hypervisor, never this package: another hypervisor, or another QEMU
// version, is a driver of its own, which run.go picks by provider.
package runner
