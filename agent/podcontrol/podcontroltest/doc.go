// Package podcontroltest is what the node agent's executors' tests share: a simulated node
// (Node) whose kubelet (Kubelet, a real pod-resources gRPC server) says which control device is
// which pod's; the one fake runner (Runner) on a pod's control socket; the runner pods and the
// VMs that name them (RunnerPod, VM, Own, Name); and the executor run until the test ends (Run).
package podcontroltest
