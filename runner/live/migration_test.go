package live

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/hypervisor"
	chdriver "github.com/virtpod/virtpod/runner/hypervisor/cloudhypervisor"
	qemudriver "github.com/virtpod/virtpod/runner/hypervisor/qemu"
	"github.com/virtpod/virtpod/runner/status"
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

func migrationHandler(cfg runnerconfig.Config, hv hypervisor.Hypervisor) http.Handler {
	return Handler(NewResize(cfg, hv.(hypervisor.Resizer), time.Second, zap.NewNop()).Routes,
		NewMigration(cfg, hv, status.New("qemu", "tcg"), zap.NewNop()).Routes)
}

// TestMigrationCloudHypervisor: cloud-hypervisor guests do not migrate; every method says so
// with 501, naming the provider.
func TestMigrationCloudHypervisor(t *testing.T) {
	cfg := resizableConfig()
	cfg.Provider = runnerconfig.ProviderCloudHypervisor
	h := migrationHandler(cfg, chdriver.New("", hypervisor.Machine{Sockets: hypervisor.Sockets{Control: "/nonexistent"}}, zap.NewNop()))
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		if code, s := callMigration(t, h, m, `{"autoConverge":true}`); code != http.StatusNotImplemented || !strings.Contains(s.Error, "provider cloud-hypervisor cannot migrate") {
			t.Errorf("%s: %d %+v; want 501 naming the provider", m, code, s)
		}
	}
}

// TestMigrationRequests: bad bodies are refused naming the field before QEMU is asked anything;
// a guest QEMU does not run answers 503; a guest with a writable claim that says nothing of
// migration cannot be sent, and what is mirrored follows each disk's kind.
func TestMigrationRequests(t *testing.T) {
	h := migrationHandler(resizableConfig(), qemudriver.New("", nil, machineForTest(), zap.NewNop()))
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
	withClaim := resizableConfig()
	withClaim.Disks = []runnerconfig.Disk{{Name: "data", Kind: runnerconfig.DiskFile}}
	if mig := NewMigration(withClaim, qemudriver.New("", nil, machineForTest(), zap.NewNop()), status.New("qemu", "tcg"), zap.NewNop()); !strings.Contains(mig.refuse, "writable claims of drives disk-data: each needs migrate=copy") {
		t.Errorf("a guest with a claim of no migrate mode: refuse %q", mig.refuse)
	}
	for name, tc := range map[string]struct {
		root  *runnerconfig.Disk
		disks []runnerconfig.Disk
		want  []hypervisor.MirrorDisk
	}{
		"overlay only": {want: []hypervisor.MirrorDisk{{Drive: "root"}}},
		"every kind": {
			disks: []runnerconfig.Disk{
				{Name: "copied", Kind: runnerconfig.DiskFile, Migrate: runnerconfig.MigrateCopy},
				{Name: "shared", Kind: runnerconfig.DiskBlock, Migrate: runnerconfig.MigrateShared},
				{Name: "scratch", Kind: runnerconfig.DiskEmpty, SizeMiB: 8},
				{Name: "config", Kind: runnerconfig.DiskFiles, ReadOnly: true},
				{Name: "tools", Kind: runnerconfig.DiskImage, ReadOnly: true},
			},
			want: []hypervisor.MirrorDisk{{Drive: "root"}, {Drive: "disk-copied", Whole: true}, {Drive: "disk-scratch", Whole: true}},
		},
		"root on a copied claim": {root: &runnerconfig.Disk{Kind: runnerconfig.DiskFile, Migrate: runnerconfig.MigrateCopy},
			want: []hypervisor.MirrorDisk{{Drive: "root", Whole: true}}},
		"root on a shared claim": {root: &runnerconfig.Disk{Kind: runnerconfig.DiskBlock, Migrate: runnerconfig.MigrateShared}},
		"shared file claims with O_DIRECT": {root: &runnerconfig.Disk{Kind: runnerconfig.DiskFile, Path: "/virtpod/root", Migrate: runnerconfig.MigrateShared},
			disks: []runnerconfig.Disk{{Name: "data", Kind: runnerconfig.DiskFile, Path: "/virtpod/disks/data", Migrate: runnerconfig.MigrateShared}}},
	} {
		cfg := resizableConfig()
		cfg.RootVolume, cfg.Disks = tc.root, tc.disks
		got, refuse := mirrorDisks(cfg, func(string) bool { return true })
		if refuse != "" || !slices.Equal(got, tc.want) {
			t.Errorf("%s: mirrors %+v (refused %q), want %+v", name, got, refuse, tc.want)
		}
	}
	// A shared file claim whose file system has no O_DIRECT runs cache=writeback: refused, named.
	cfg := resizableConfig()
	cfg.Disks = []runnerconfig.Disk{{Name: "nfs", Kind: runnerconfig.DiskFile, Path: "/virtpod/disks/nfs", Migrate: runnerconfig.MigrateShared},
		{Name: "raw", Kind: runnerconfig.DiskBlock, Path: "/dev/virtpod/raw", Migrate: runnerconfig.MigrateShared}}
	if _, refuse := mirrorDisks(cfg, func(dir string) bool { return dir != "/virtpod/disks/nfs" }); !strings.Contains(refuse, "shared claims of drives disk-nfs: their file system does not support O_DIRECT") {
		t.Errorf("a shared claim without O_DIRECT: refuse %q", refuse)
	}
}
