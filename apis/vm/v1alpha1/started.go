package v1alpha1

// AnnotationGuestStarted on a runner pod is when its guest started running (RFC 3339), written
// once by the node agent (agent/start) as the runner reports it. The controller reports
// the VM Running from it: the kubelet's startup probe says the same up to a second later, as it
// probes on its own ticks and only once the pod's status shows the container.
const AnnotationGuestStarted = "vm.virtpod.io/guest-started"

// AnnotationGuestMachine on a runner pod is the machine type its guest runs on (pc-q35-10.0),
// written with AnnotationGuestStarted from the runner's own report. The controller pins it as
// status.machine: the machine of the QEMU in the runner image that ran the guest, which may not
// be the QEMU the node agent reports for the node.
const AnnotationGuestMachine = "vm.virtpod.io/guest-machine"
