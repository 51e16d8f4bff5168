// Package controlapi is the runner's control API on the wire (docs/runner.md): what the runner
// serves on its control socket and the node agent sends, in one place for both.
package controlapi

// SizePath is the resource: GET reads the guest's size, PUT asks for a new one.
const SizePath = "/v1/size"

// Size is the control API's view of the guest's size. CPUs are the vCPUs the hypervisor has
// plugged and the guest acknowledged; Memory is boot memory plus what the guest's virtio-mem
// driver really plugged. Error, when set, says why a request was not done.
type Size struct {
	CPUs      int32  `json:"cpus"`
	Memory    string `json:"memory"`
	MaxCPUs   int32  `json:"maxCPUs"`
	MaxMemory string `json:"maxMemory"`
	Pending   bool   `json:"pending"`
	Error     string `json:"error,omitempty"`
}

// SizeRequest is the body of a PUT: the vCPUs and memory (a quantity such as 768Mi) wanted.
type SizeRequest struct {
	CPUs   int32  `json:"cpus"`
	Memory string `json:"memory"`
}
