// Package runner turns one VM's configuration into a running guest inside its pod: it checks
// the host, prepares the root disk and the network, starts the hypervisor as a child,
// supervises it, and ends with an exit code and a termination message that state the cause.
//
// runner/ is virtpod's node side: everything that runs on a node lives below it.
//
//	runner                     this package: the runner in each VM pod; boot orchestration,
//	                           supervision, and its status, control and migration servers
//	cmd/virtpod-runner  its command, virtpod-runner
//	runner/hypervisor          what the runner and its drivers share: the Hypervisor, Resizer
//	                           and Migrator interfaces, events, MigrationInfo, the child process
//	runner/hypervisor/qemu     the QEMU driver: boot, resize and migration over QMP (qmp.go)
//	runner/hypervisor/cloudhypervisor  the cloud-hypervisor driver: boot and resize over its API
//	runner/kvm                 is KVM usable on this node, and why not
//	runner/binaries            the hypervisor programs and where the runner image has them
//	agent/nodereport               the node agent: probes the node, labels it, writes its HypervisorNode
//	cmd/virtpod-agent   its command, also the device plugin (virtpod-agent device-plugin)
//	agent/deviceplugin        serves /dev/kvm to pods as devices.virtpod.io/kvm
//	cmd/vmcopy          the copy program VM images carry, for clusters without image volumes
//
// A driver imports runner/hypervisor, never this package: another hypervisor, or another QEMU
// version, is a driver of its own, which run.go picks by provider.
package runner
