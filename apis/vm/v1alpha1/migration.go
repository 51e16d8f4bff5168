package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
)

// Live migration (docs/migration.md): the contract between the migration controller
// and the node agents, written on the runner pods. The controller owns the role label and the
// migration, migrate-to and migration-resume annotations; the target node's agent writes
// migration-receiver and the source node's agent migration-state (a ValidatingAdmissionPolicy
// lets it change nothing else, and only on pods of its own node).
const (
	// LabelMigrationRole is "target" on a pod made to receive a migrating guest.
	LabelMigrationRole  = "vm.virtpod.io/migration-role"
	MigrationRoleTarget = "target"

	// AnnotationMigration is the VirtualMachineMigration's UID, on the target and source pods.
	AnnotationMigration = "vm.virtpod.io/migration"
	// AnnotationMigrationReceiver is <ip>:<port> on the target pod, written by its node's agent
	// once the target runner listens for the stream: where to send it.
	AnnotationMigrationReceiver = "vm.virtpod.io/migration-receiver"
	// AnnotationMigrateTo is <ip>:<port>/<target pod UID> on the source pod, written by the
	// controller: the source agent starts sending. Removing it while active cancels.
	AnnotationMigrateTo = "vm.virtpod.io/migrate-to"
	// AnnotationMigrationBandwidth is the migration's spec.bandwidthMiBps on the source pod,
	// written with migrate-to when set: the source agent passes it in its MigrationRequest.
	AnnotationMigrationBandwidth = "vm.virtpod.io/migration-bandwidth-mibps"
	// AnnotationMigrationState is the source runner's migration status (JSON
	// controlapi.MigrationStatus), written by the source agent.
	AnnotationMigrationState = "vm.virtpod.io/migration-state"
	// AnnotationMigrationResume is "true" on a source pod whose completed send went to a target
	// that died: the agent has the runner resume the guest here.
	AnnotationMigrationResume = "vm.virtpod.io/migration-resume"
)

// MigrationFinalizer holds a VirtualMachineMigration until its target pod is cleaned up.
const MigrationFinalizer = "vm.virtpod.io/migration"

// EvacuationSuffix names the migration the controller makes for a LiveMigrate VM on a cordoned
// node: <vm>-evacuation.
const EvacuationSuffix = "-evacuation"

// ReservedKeyPrefix begins every label and annotation key virtpod sets on runner pods. Only the
// controller (and, for its reports, the node agent) may set, change or remove such keys on a
// pod, and no VirtualMachine may carry such a label, since a VM's labels are copied to its pod
// (config/admission/runner-pods-policy.yaml).
const ReservedKeyPrefix = "vm.virtpod.io/"

// LabelImageUpdate is on a VirtualMachineMigration the VM controller made to move a guest onto a
// new runner image (imageUpdatePolicy LiveMigrate); its value is the VM's name.
const LabelImageUpdate = "vm.virtpod.io/image-update"

// ImageUpdateMigrationName is the deterministic name of the migration that moves VM vmName's
// guest onto runnerImage: one per VM and image, so a failed one is the record (it is not made
// again) until someone deletes it.
func ImageUpdateMigrationName(vmName, runnerImage string) string {
	sum := sha256.Sum256([]byte(runnerImage))
	return vmName + "-update-" + hex.EncodeToString(sum[:])[:8]
}
