package hypervisor

import (
	"encoding/json"
	"testing"

	"github.com/virtpod/virtpod/pkg/controlapi"
)

// TestMigrationStateMapping: QEMU's many migration states map onto the control API's few, the
// target's "none" being its wait for the stream, and bytes add RAM and disk.
func TestMigrationStateMapping(t *testing.T) {
	for qs, want := range map[string][2]string{
		"": {"none", "waiting"}, "setup": {"active", "active"}, "active": {"active", "active"}, "device": {"active", "active"},
		"pre-switchover": {"active", "active"}, "cancelling": {"active", "active"}, "completed": {"completed", "completed"},
		"failed": {"failed", "failed"}, "cancelled": {"cancelled", "cancelled"},
	} {
		if src, dst := MigrationState(qs, false), MigrationState(qs, true); src != want[0] || dst != want[1] {
			t.Errorf("%q: source %q target %q, want %q", qs, src, dst, want)
		}
	}
	var m MigrationInfo
	_ = json.Unmarshal([]byte(`{"status":"completed","downtime":42,"total-time":900,"ram":{"transferred":10,"remaining":1,"total":100},"disk":{"transferred":5,"remaining":2,"total":50}}`), &m)
	if s := m.APIStatus(controlapi.RoleSource); s != (controlapi.MigrationStatus{Role: "source", State: "completed", TransferredBytes: 15, RemainingBytes: 3, TotalBytes: 150, DowntimeMs: 42, TotalTimeMs: 900}) {
		t.Errorf("status %+v", s)
	}
}
