package hypervisor

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/virtpod/virtpod/pkg/controlapi"
)

// TestMigrationStateMapping: QEMU's many migration states map onto the control API's few, the
// target's "none" (QEMU 7.2) or "setup" (9.1 and later) being its wait for the stream, and bytes add
// RAM and the mirrored disks.
func TestMigrationStateMapping(t *testing.T) {
	for qs, want := range map[string][2]string{
		"": {"none", "waiting"}, "setup": {"active", "waiting"}, "active": {"active", "active"}, "device": {"active", "active"},
		"pre-switchover": {"active", "active"}, "cancelling": {"active", "active"}, "completed": {"completed", "completed"},
		"failed": {"failed", "failed"}, "cancelled": {"cancelled", "cancelled"},
	} {
		if src, dst := MigrationState(qs, false), MigrationState(qs, true); src != want[0] || dst != want[1] {
			t.Errorf("%q: source %q target %q, want %q", qs, src, dst, want)
		}
	}
	var m MigrationInfo
	_ = json.Unmarshal([]byte(`{"status":"completed","downtime":42,"total-time":900,"ram":{"transferred":10,"remaining":1,"total":100}}`), &m)
	m.Mirrors = []MirrorProgress{{Drive: "root", Transferred: 5, Total: 7}, {Drive: "disk-scratch", Transferred: 50, Total: 50}}
	want := controlapi.MigrationStatus{Role: "source", State: "completed", TransferredBytes: 65, RemainingBytes: 3, TotalBytes: 157, DowntimeMs: 42, TotalTimeMs: 900,
		Disks: []string{"root", "disk-scratch"}, DiskBytes: 55}
	if s := m.APIStatus(controlapi.RoleSource); !reflect.DeepEqual(s, want) {
		t.Errorf("status %+v, want %+v", s, want)
	}
}
