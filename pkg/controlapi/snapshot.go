package controlapi

// DrivesPath lists the guest's drives (GET answers []Drive): what a backup's targets must
// match, since QEMU copies a drive only onto a target of exactly its size.
const DrivesPath = "/v1/drives"

// Drive is one of the guest's drives: its id (root, cidata, disk-<name>), its size in bytes,
// and whether the guest may write it.
type Drive struct {
	Drive     string `json:"drive"`
	SizeBytes int64  `json:"sizeBytes"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
}

// DriveOf is the runner's drive id of a VM's disk: root, or disk-<name> for a data disk.
func DriveOf(disk string) string {
	if disk == "root" {
		return "root"
	}
	return "disk-" + disk
}

// SnapshotResult is the node agent's answer on a runner pod (the annotation
// vm.virtpod.io/snapshot-result): the snapshot it copied for, and the runner's status of the
// copy (Error set when it failed).
type SnapshotResult struct {
	Snapshot string       `json:"snapshot"`
	Status   BackupStatus `json:"status"`
}
