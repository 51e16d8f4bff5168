package runner

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

func callMigration(t *testing.T, h http.Handler, method, body string) (int, MigrationStatus) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, controlapi.MigrationPath, strings.NewReader(body)))
	var s MigrationStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
		t.Fatalf("%s: %q: %v", method, rec.Body, err)
	}
	return rec.Code, s
}

func migrationHandler(cfg runnerconfig.Config, hv hypervisor) http.Handler {
	c := newControlServer(cfg, hv.(resizer), time.Second, zap.NewNop())
	c.mig = newMigration(cfg, hv, &statusBoard{}, zap.NewNop())
	return c.handler()
}

// TestMigrationCloudHypervisor: cloud-hypervisor guests do not migrate; every method says so
// with 501, naming the provider.
func TestMigrationCloudHypervisor(t *testing.T) {
	cfg := resizableConfig()
	cfg.Provider = runnerconfig.ProviderCloudHypervisor
	h := migrationHandler(cfg, newCloudHypervisor("", cfg, cloudHypervisorInputs{apiSocket: "/nonexistent"}, zap.NewNop()))
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		if code, s := callMigration(t, h, m, `{"autoConverge":true}`); code != http.StatusNotImplemented || !strings.Contains(s.Error, "provider cloud-hypervisor cannot migrate") {
			t.Errorf("%s: %d %+v; want 501 naming the provider", m, code, s)
		}
	}
}

// TestMigrationRequests: bad bodies are refused naming the field before QEMU is asked anything;
// a guest QEMU does not run answers 503; a guest with data disks cannot be sent.
func TestMigrationRequests(t *testing.T) {
	h := migrationHandler(resizableConfig(), newQEMU("", nil, qemuSpecForTest(), nil, zap.NewNop()))
	for _, bad := range []struct {
		body       string
		code       int
		field, why string
	}{
		{`{"bandwidthMiBps":-1}`, http.StatusUnprocessableEntity, "bandwidthMiBps:", "negative"},
		{`{"downtimeLimitMs":-5}`, http.StatusUnprocessableEntity, "downtimeLimitMs:", "negative"},
		{`{"bandwidth":5}`, http.StatusBadRequest, "body:", `unknown field "bandwidth"`},
		{`{"autoConverge":"yes"}`, http.StatusBadRequest, "body:", "autoConverge"},
		{`{"autoConverge":true}`, http.StatusServiceUnavailable, "", "not running"},
	} {
		code, s := callMigration(t, h, http.MethodPut, bad.body)
		if code != bad.code || !strings.HasPrefix(s.Error, bad.field) || !strings.Contains(s.Error, bad.why) {
			t.Errorf("PUT %s: %d %q; want %d naming %s and %q", bad.body, code, s.Error, bad.code, bad.field, bad.why)
		}
	}
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		if code, s := callMigration(t, h, m, ""); code != http.StatusServiceUnavailable || !strings.Contains(s.Error, "not running") {
			t.Errorf("%s before start: %d %+v", m, code, s)
		}
	}
	withDisks := resizableConfig()
	withDisks.Disks = []runnerconfig.Disk{{Name: "data"}}
	if mig := newMigration(withDisks, newQEMU("", nil, qemuSpecForTest(), nil, zap.NewNop()), &statusBoard{}, zap.NewNop()); !strings.Contains(mig.refuse, "writable data disks") {
		t.Errorf("a guest with data disks: refuse %q", mig.refuse)
	}
}

// TestMigrationStateMapping: QEMU's many migration states map onto the control API's few, the
// target's "none" being its wait for the stream, and bytes add RAM and disk.
func TestMigrationStateMapping(t *testing.T) {
	for qs, want := range map[string][2]string{
		"": {"none", "waiting"}, "setup": {"active", "active"}, "active": {"active", "active"}, "device": {"active", "active"},
		"pre-switchover": {"active", "active"}, "cancelling": {"active", "active"}, "completed": {"completed", "completed"},
		"failed": {"failed", "failed"}, "cancelled": {"cancelled", "cancelled"},
	} {
		if src, dst := migrationState(qs, false), migrationState(qs, true); src != want[0] || dst != want[1] {
			t.Errorf("%q: source %q target %q, want %q", qs, src, dst, want)
		}
	}
	var m migrationInfo
	_ = json.Unmarshal([]byte(`{"status":"completed","downtime":42,"total-time":900,"ram":{"transferred":10,"remaining":1,"total":100},"disk":{"transferred":5,"remaining":2,"total":50}}`), &m)
	if s := m.status(controlapi.RoleSource); s != (MigrationStatus{Role: "source", State: "completed", TransferredBytes: 15, RemainingBytes: 3, TotalBytes: 150, DowntimeMs: 42, TotalTimeMs: 900}) {
		t.Errorf("status %+v", s)
	}
}
