package v1alpha1

// Live migration's pod labels and annotations: the protocol between the migration controller and
// the node agents (docs/api.md, Live migration). The controller writes the migration, migrate-to
// and resume keys and the role label; the agents write only the receiver (on target pods of their
// node) and the state (on source pods of their node), which the ValidatingAdmissionPolicy
// virtpod-agent-pods enforces.
const (
	// LabelMigrationRole is MigrationRoleTarget on a migration's target pod.
	LabelMigrationRole  = "vm.virtpod.io/migration-role"
	MigrationRoleTarget = "target"
	// AnnotationMigration is the VirtualMachineMigration's UID, on its source and target pods.
	AnnotationMigration = "vm.virtpod.io/migration"
	// AnnotationMigrationReceiver is <ip>:<port> on the target pod: where its node's agent takes
	// the stream, written once the target runner's QEMU listens.
	AnnotationMigrationReceiver = "vm.virtpod.io/migration-receiver"
	// AnnotationMigrateTo is <ip>:<port>/<target pod UID> on the source pod: start sending there.
	// Removing it while the migration is active cancels it.
	AnnotationMigrateTo = "vm.virtpod.io/migrate-to"
	// AnnotationMigrationState is the source runner's controlapi.MigrationStatus as JSON, on the
	// source pod, written by its node's agent.
	AnnotationMigrationState = "vm.virtpod.io/migration-state"
	// AnnotationMigrationResume is "true" on a source pod whose completed send went to a target
	// that died: the agent has the runner resume the guest there.
	AnnotationMigrationResume = "vm.virtpod.io/migration-resume"
)
