package live

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/runner/hypervisor"
	"github.com/virtpod/virtpod/runner/status"
)

// backupGuest is a hypervisor whose backups answer err (nil: each drive copied whole), after
// block is closed when it is not nil.
type backupGuest struct {
	hypervisor.Hypervisor
	err       error
	block     chan struct{}
	quiesced  bool
	requested controlapi.BackupRequest
}

func (g *backupGuest) Drives(context.Context) ([]controlapi.Drive, error) {
	return []controlapi.Drive{{Drive: "disk-data", SizeBytes: 1 << 20}}, nil
}

func (g *backupGuest) Backup(_ context.Context, _ string, req controlapi.BackupRequest, quiesce func() func()) (controlapi.BackupStatus, error) {
	if g.block != nil {
		<-g.block
	}
	g.requested = req
	st := controlapi.BackupStatus{Bitmap: req.Bitmap}
	if g.err != nil {
		return st, g.err
	}
	if quiesce != nil {
		g.quiesced = true
		quiesce()()
	}
	for _, d := range req.Drives {
		st.Drives = append(st.Drives, controlapi.BackupDriveStatus{Drive: d.Drive, Size: 1 << 20, Copied: 1 << 20})
	}
	return st, nil
}

func callBackup(t *testing.T, h http.Handler, method, body string) (int, controlapi.BackupStatus) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, controlapi.BackupPath, strings.NewReader(body)))
	var s controlapi.BackupStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
		t.Fatalf("%s: %q: %v", method, rec.Body, err)
	}
	return rec.Code, s
}

// backupHandler serves g's backups from a control directory where data.sock listens.
func backupHandler(t *testing.T, g *backupGuest, board *status.Board) http.Handler {
	t.Helper()
	cfg := resizableConfig()
	cfg.ControlSocket = filepath.Join(t.TempDir(), "runner.sock")
	l, err := net.Listen("unix", filepath.Join(filepath.Dir(cfg.ControlSocket), "data.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	sus := NewSuspender(cfg, g, nil, board, zap.NewNop())
	return Handler(NewBackup(cfg, sus, NewMigration(cfg, g, board, zap.NewNop()), NewGuestAgent("", g), board, zap.NewNop()).Routes)
}

// TestBackupRequests: bad bodies are refused naming the field before the hypervisor is asked;
// a guest that does not run, a target nobody serves and the hypervisor's refusals answer 409;
// a freeze without an agent leaves a crash-consistent backup that says why; a failed copy is
// 500, and GET reports the last backup.
func TestBackupRequests(t *testing.T) {
	g := &backupGuest{}
	board := status.New("qemu", "tcg")
	h := backupHandler(t, g, board)
	const good = `{"drives":[{"drive":"disk-data","socket":"data.sock"}],"bitmap":"b1","freeze":true}`
	for _, bad := range []struct {
		body, field string
		code        int
	}{
		{`{"drives":[{"drive":"disk-data","socket":"data.sock"}],"bitmap":"b_1"}`, "bitmap:", http.StatusUnprocessableEntity},
		{`{"drives":[{"drive":"disk-data","socket":"../data.sock"}],"bitmap":"b1"}`, "drives[0].socket:", http.StatusUnprocessableEntity},
		{`{"drives":[{"drive":"disk-data","socket":"data.sock","since":"b1"}],"bitmap":"b1"}`, "drives[0].since:", http.StatusUnprocessableEntity},
		{`{"drives":[],"bitmap":"b1"}`, "drives:", http.StatusUnprocessableEntity},
		{`{"drives":[{"drive":"disk-data","socket":"data.sock"}],"bitmap":"b1","now":true}`, "body:", http.StatusBadRequest},
		{good, "the guest is not running", http.StatusConflict},
	} {
		if code, s := callBackup(t, h, http.MethodPut, bad.body); code != bad.code || !strings.HasPrefix(s.Error, bad.field) {
			t.Errorf("PUT %s: %d %q; want %d naming %s", bad.body, code, s.Error, bad.code, bad.field)
		}
	}
	board.Set(status.StateRunning, "")
	if code, s := callBackup(t, h, http.MethodPut, `{"drives":[{"drive":"root","socket":"root.sock"}],"bitmap":"b1"}`); code != http.StatusConflict || !strings.Contains(s.Error, "drive root: nothing listens on") {
		t.Errorf("a target nobody serves: %d %+v", code, s)
	}
	if g.requested.Bitmap != "" {
		t.Fatalf("the hypervisor was asked for a refused request: %+v", g.requested)
	}
	code, s := callBackup(t, h, http.MethodPut, good)
	if code != http.StatusOK || !g.quiesced || s.Consistency != controlapi.ConsistencyCrash || !strings.Contains(s.FreezeError, "no agent channel") ||
		s.State != controlapi.BackupCompleted || len(s.Drives) != 1 || s.Bitmap != "b1" {
		t.Errorf("a backup with a freeze but no agent: %d %+v", code, s)
	}
	g.err = &hypervisor.BackupRefusal{Reason: "drive disk-data has no bitmap b0: take a full one"}
	if code, s := callBackup(t, h, http.MethodPut, good); code != http.StatusConflict || s.Error != g.err.Error() {
		t.Errorf("a refusal: %d %+v", code, s)
	}
	if _, s := callBackup(t, h, http.MethodGet, ""); s.State != controlapi.BackupCompleted {
		t.Errorf("GET after a refusal: %+v, want the last backup's", s)
	}
	g.err = errors.New("the backup of drive disk-data failed: Input/output error")
	if code, s := callBackup(t, h, http.MethodPut, good); code != http.StatusInternalServerError || s.State != controlapi.BackupFailed || s.Error != g.err.Error() {
		t.Errorf("a failed copy: %d %+v", code, s)
	}
	if _, s := callBackup(t, h, http.MethodGet, ""); s.State != controlapi.BackupFailed {
		t.Errorf("GET after a failure: %+v", s)
	}
}

// TestBackupOneAtATime: a second PUT while one runs is refused, and GET says one runs.
func TestBackupOneAtATime(t *testing.T) {
	g := &backupGuest{block: make(chan struct{})}
	board := status.New("qemu", "tcg")
	board.Set(status.StateRunning, "")
	h := backupHandler(t, g, board)
	const body = `{"drives":[{"drive":"disk-data","socket":"data.sock"}],"bitmap":"b1"}`
	done := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, controlapi.BackupPath, strings.NewReader(body)))
		done <- rec.Code
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, s := callBackup(t, h, http.MethodGet, ""); s.State == controlapi.BackupRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("GET never said a backup runs")
		}
	}
	if code, s := callBackup(t, h, http.MethodPut, body); code != http.StatusConflict || !strings.Contains(s.Error, "already under way") {
		t.Errorf("a second backup: %d %+v", code, s)
	}
	close(g.block)
	if code := <-done; code != http.StatusOK {
		t.Errorf("the first backup: %d", code)
	}
}

// TestBackupCloudHypervisor: a provider without backups says so.
func TestBackupCloudHypervisor(t *testing.T) {
	cfg := resizableConfig()
	board := status.New("cloud-hypervisor", "kvm")
	var hv hypervisor.Hypervisor = &meteredGuest{}
	h := Handler(NewBackup(cfg, NewSuspender(cfg, hv, nil, board, zap.NewNop()), nil, NewGuestAgent("", hv), board, zap.NewNop()).Routes)
	if code, s := callBackup(t, h, http.MethodPut, `{}`); code != http.StatusNotImplemented || !strings.Contains(s.Error, "cloud-hypervisor cannot back up") {
		t.Errorf("%d %+v", code, s)
	}
}
