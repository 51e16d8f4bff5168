package live

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/hypervisor"
	chdriver "github.com/virtpod/virtpod/runner/hypervisor/cloudhypervisor"
	"github.com/virtpod/virtpod/runner/status"
)

// slotGuest is a hypervisor whose slots take every request (err nil), as it records it.
type slotGuest struct {
	hypervisor.Hypervisor
	err     error
	dir     string
	request *controlapi.HotplugRequest
}

func (g *slotGuest) Hotplug(_ context.Context, dir string, req controlapi.HotplugRequest) (controlapi.HotplugStatus, error) {
	g.dir, g.request = dir, &req
	if g.err != nil {
		return controlapi.HotplugStatus{}, g.err
	}
	return g.Hotplugged(context.Background())
}

func (g *slotGuest) Hotplugged(context.Context) (controlapi.HotplugStatus, error) {
	st := controlapi.HotplugStatus{Disks: []controlapi.HotplugDiskState{}}
	if g.request != nil {
		for _, d := range g.request.Disks {
			st.Disks = append(st.Disks, controlapi.HotplugDiskState{Name: d.Name, Slot: d.Slot, State: controlapi.DiskStateAttached})
		}
	}
	return st, g.err
}

func callHotplug(t *testing.T, h http.Handler, method, body string) (int, controlapi.HotplugStatus) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, controlapi.HotplugPath, strings.NewReader(body)))
	var s controlapi.HotplugStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
		t.Fatalf("%s: %q: %v", method, rec.Body, err)
	}
	return rec.Code, s
}

func hotplugHandler(t *testing.T, g hypervisor.Hypervisor, slots int, board *status.Board) http.Handler {
	cfg := runnerconfig.Config{HotplugSlots: slots, ControlSocket: filepath.Join(t.TempDir(), "runner.sock")}
	return Handler(NewHotplug(cfg, g, NewSuspender(cfg, g, nil, board, zap.NewNop()), NewMigration(cfg, g, board, zap.NewNop()), board, zap.NewNop()).Routes)
}

// TestHotplugRequests: a bad request is refused naming the field before the hypervisor is asked,
// and so is any while the guest does not run; a good one reaches the hypervisor with the control
// directory, and its slots come back, on GET too; the hypervisor's refusals keep their meaning.
func TestHotplugRequests(t *testing.T) {
	g := &slotGuest{}
	board := status.New("qemu", "tcg")
	h := hotplugHandler(t, g, 4, board)
	const good = `{"disks":[{"name":"data","slot":1,"socket":"hotplug-data.sock"},{"name":"boot","slot":0}]}`
	for _, bad := range []struct {
		body, want string
		code       int
	}{
		{`{"disks":[{"name":"data","slot":4}]}`, "disks[0].slot 4: the guest has slots 0 to 3", http.StatusBadRequest},
		{`{"disks":[{"name":"data","slot":0,"socket":"../data.sock"}]}`, `disks[0].socket "../data.sock": want "hotplug-data.sock"`, http.StatusBadRequest},
		{`{"disks":[{"name":"Data","slot":0}]}`, "want a disk name", http.StatusBadRequest},
		{`{"disks":[],"releaseSeconds":601}`, "releaseSeconds 601", http.StatusBadRequest},
		{`{"disks":[],"now":true}`, "body:", http.StatusBadRequest},
		{good, "the guest is not running", http.StatusConflict},
	} {
		if code, s := callHotplug(t, h, http.MethodPut, bad.body); code != bad.code || !strings.Contains(s.Error, bad.want) {
			t.Errorf("PUT %s: %d %q; want %d with %q", bad.body, code, s.Error, bad.code, bad.want)
		}
	}
	if g.request != nil {
		t.Fatalf("the hypervisor was asked for a refused request: %+v", g.request)
	}
	board.Set(status.StateRunning, "")
	code, s := callHotplug(t, h, http.MethodPut, good)
	if code != http.StatusOK || len(s.Disks) != 2 || s.Error != "" || len(g.request.Disks) != 2 || g.dir == "" {
		t.Fatalf("a good request: %d %+v (asked %+v in %q)", code, s, g.request, g.dir)
	}
	if code, s := callHotplug(t, h, http.MethodGet, ""); code != http.StatusOK || len(s.Disks) != 2 {
		t.Errorf("GET: %d %+v", code, s)
	}
	for _, c := range []struct {
		err  error
		code int
	}{
		{hypervisor.ErrNotRunning, http.StatusConflict},
		{fmt.Errorf("%w: a migration runs", hypervisor.ErrRefused), http.StatusConflict},
		{fmt.Errorf("%w: disk hotplug", hypervisor.ErrUnsupported), http.StatusNotImplemented},
	} {
		g.err = c.err
		if code, s := callHotplug(t, h, http.MethodPut, good); code != c.code || s.Error != c.err.Error() {
			t.Errorf("the hypervisor answers %v: %d %+v", c.err, code, s)
		}
		if code, _ := callHotplug(t, h, http.MethodGet, ""); code != c.code {
			t.Errorf("GET while the hypervisor answers %v: %d", c.err, code)
		}
	}
}

// TestHotplugWithoutSlots: a guest started without slots says so.
func TestHotplugWithoutSlots(t *testing.T) {
	board := status.New("qemu", "tcg")
	board.Set(status.StateRunning, "")
	h := hotplugHandler(t, &slotGuest{}, 0, board)
	if code, s := callHotplug(t, h, http.MethodPut, `{"disks":[{"name":"data","slot":0}]}`); code != http.StatusBadRequest || !strings.Contains(s.Error, "no hotplug slots (--hotplug-slots 0)") {
		t.Errorf("%d %+v", code, s)
	}
	if code, _ := callHotplug(t, h, http.MethodPut, `{"disks":[]}`); code != http.StatusOK {
		t.Errorf("nothing on no slots: %d", code)
	}
}

// TestHotplugCloudHypervisor: a provider without hotplug says so, as 501.
func TestHotplugCloudHypervisor(t *testing.T) {
	board := status.New("cloud-hypervisor", "kvm")
	board.Set(status.StateRunning, "")
	h := hotplugHandler(t, chdriver.New("", hypervisor.Machine{Sockets: hypervisor.Sockets{Control: "/nonexistent"}}, zap.NewNop()), 0, board)
	for _, m := range []string{http.MethodGet, http.MethodPut} {
		if code, s := callHotplug(t, h, m, `{"disks":[]}`); code != http.StatusNotImplemented || !strings.Contains(s.Error, "provider cloud-hypervisor cannot attach or detach disks") {
			t.Errorf("%s: %d %+v", m, code, s)
		}
	}
}
