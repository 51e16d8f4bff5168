package v1alpha1

// AnnotationGuestStarted on a runner pod is when its guest started running (RFC 3339), written
// once by the node agent (runner/startagent) as the runner reports it. The controller reports
// the VM Running from it: the kubelet's startup probe says the same up to a second later, as it
// probes on its own ticks and only once the pod's status shows the container.
const AnnotationGuestStarted = "vm.virtpod.io/guest-started"
