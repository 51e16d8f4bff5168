package live

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/hypervisor"
	"github.com/virtpod/virtpod/runner/status"
)

// Disk hotplug on the control API (docs/hotplug.md): PUT /v1/hotplug brings the guest's hotplug
// slots to the request, attaching disks the node agent serves over NBD in the control directory
// and detaching those it lacks, and answers what the guest has then; GET reads it. Not while the
// guest is not running, migrates or is being suspended.

// hotplugSlack is how long a PUT may take beyond the guest's release time: the attaches.
const hotplugSlack = time.Minute

// Hotplug is the control API's disk hotplug.
type Hotplug struct {
	hv     hypervisor.Hypervisor
	slots  int
	ctlDir string
	mig    *Migration
	sus    *Suspender
	board  *status.Board
	log    *zap.Logger
}

// NewHotplug serves hv's cfg.HotplugSlots slots from cfg's control directory, refusing while mig
// or sus is under way.
func NewHotplug(cfg runnerconfig.Config, hv hypervisor.Hypervisor, sus *Suspender, mig *Migration, board *status.Board, log *zap.Logger) *Hotplug {
	h := &Hotplug{hv: hv, slots: cfg.HotplugSlots, mig: mig, sus: sus, board: board, log: log}
	if cfg.ControlSocket != "" {
		h.ctlDir = filepath.Dir(cfg.ControlSocket)
	}
	return h
}

// Routes registers GET and PUT /v1/hotplug.
func (h *Hotplug) Routes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+controlapi.HotplugPath, func(w http.ResponseWriter, r *http.Request) {
		st, err := h.hv.Hotplugged(r.Context())
		if err != nil {
			writeJSON(w, statusOf(err), controlapi.HotplugStatus{Disks: st.Disks, Error: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("PUT "+controlapi.HotplugPath, h.put)
}

// put answers 200 with the slots once the guest got to the request or a disk failed (the
// status says which and why), 400 for a bad request, 409 when the guest cannot take one now,
// 501 when its hypervisor has no hotplug.
func (h *Hotplug) put(w http.ResponseWriter, r *http.Request) {
	var req controlapi.HotplugRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, controlapi.HotplugStatus{Error: "body: " + err.Error() +
			`; want {"disks":[{"name":"data","slot":0,"socket":"hotplug-data.sock"}],"releaseSeconds":30}`})
		return
	}
	if err := h.validate(req); err != nil {
		writeJSON(w, http.StatusBadRequest, controlapi.HotplugStatus{Error: oneLine(err)})
		return
	}
	if why := h.cannotHotplug(); why != "" {
		writeJSON(w, http.StatusConflict, controlapi.HotplugStatus{Error: why})
		return
	}
	release := time.Duration(req.ReleaseSeconds) * time.Second
	if release == 0 {
		release = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), release+hotplugSlack)
	defer cancel()
	start := time.Now()
	st, err := h.hv.Hotplug(ctx, h.ctlDir, req)
	if err != nil {
		h.log.Info("hotplug refused", zap.Error(err))
		st.Error = err.Error()
		writeJSON(w, statusOf(err), st)
		return
	}
	h.log.Info("hotplug", zap.Any("disks", st.Disks), zap.String("error", st.Error), zap.Duration("took", time.Since(start)))
	writeJSON(w, http.StatusOK, st)
}

func (h *Hotplug) validate(req controlapi.HotplugRequest) error {
	if h.slots == 0 && len(req.Disks) > 0 {
		return errors.New("disks: the guest has no hotplug slots (--hotplug-slots 0); it gets them at its next start")
	}
	return req.Validate(h.slots)
}

// cannotHotplug says why no disk can come or go now; "" when they can.
func (h *Hotplug) cannotHotplug() string {
	if st := h.board.Get().State; st != status.StateRunning {
		return "the guest is not running (" + st + "): disks are attached to and detached from a running guest; a stopped one gets them at its next start"
	}
	if h.mig != nil && h.mig.Waiting() {
		return "this runner is a migration target waiting for its guest: it has none to attach disks to yet"
	}
	if h.mig != nil && h.mig.m != nil {
		if info, err := h.mig.m.QueryMigrate(); err == nil && hypervisor.MigrationState(info.Status, false) == controlapi.MigrationActive {
			return "a migration of the guest is under way: attach or detach disks once it ended"
		}
	}
	if suspendUnderWay(h.sus) {
		return "the guest is being suspended: its disks stay as they are"
	}
	return ""
}
