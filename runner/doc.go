// Package runner turns one VM's configuration into a running guest inside its pod: it checks
// the host, prepares the root disk and the network, starts the hypervisor as a child,
// supervises it, and ends with an exit code and a termination message that state the cause.
//
// runner/ is virtpod's node side: everything that runs on a node lives below it.
//
//	runner                     this package: the runner in each VM pod
//	runner/cmd/virtpod-runner  its command, virtpod-runner
//	runner/kvm                 is KVM usable on this node, and why not
//	runner/binaries            the hypervisor programs and where the runner image has them
//	runner/agent               the node agent: probes the node, labels it, writes its HypervisorNode
//	runner/cmd/virtpod-agent   its command, also the device plugin (virtpod-agent device-plugin)
//	runner/deviceplugin        serves /dev/kvm to pods as devices.virtpod.io/kvm
//	runner/cmd/vmcopy          the copy program VM images carry, for clusters without image volumes
//
// What the controller will ask of a running VM on its node (live resize, migration) is to be
// carried out here as well, beside the supervisor.
package runner
