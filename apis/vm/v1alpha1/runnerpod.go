package v1alpha1

// What both sides know of a runner pod: the controller renders it (pkg/podspec) and the node
// side (the agent's executors, the device plugin) finds it by these, so they live here rather
// than in either side's packages.
const (
	// LabelManagedBy is ManagedBy on every runner pod (config/admission reserves that value).
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "virtpod"
	// RunnerContainer is the runner pod's container that runs the runner (and the guest).
	RunnerContainer = "runner"
)
