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

// The runner's user and group: every runner pod runs as them (runAsNonRoot, no capability, Pod
// Security restricted). The node agent makes the guest's tap and the control directory theirs.
// 107 is the qemu user of KubeVirt's containerDisk convention (`COPY --chown=107:107`), so
// published containerDisks are readable as they are.
const (
	RunnerUID int64 = 107
	RunnerGID int64 = 107
)

// NetnsSocketName is the runner's socket in its control directory on which it hands the node
// agent its network namespace and waits for the guest's network (pkg/handoff).
const NetnsSocketName = "netns.sock"
