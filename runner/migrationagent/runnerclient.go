package migrationagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/runner/podcontrol"
)

// runnerClient speaks the runner's control API (pkg/controlapi) on one control socket.
type runnerClient struct {
	hc  *http.Client
	ctl podcontrol.Control
}

func newRunnerClient(ctl podcontrol.Control) *runnerClient {
	return &runnerClient{ctl: ctl, hc: ctl.HTTPClient(vmv1.ControlSocketName, 30*time.Second)}
}

func (r *runnerClient) close() { r.hc.CloseIdleConnections() }

// do sends one request on the migration resource and returns the runner's status; a status
// other than ok is an error carrying the runner's own words, the status still returned when the
// runner sent one.
func (r *runnerClient) do(ctx context.Context, method string, body any, ok ...int) (controlapi.MigrationStatus, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://runner"+controlapi.MigrationPath, rd)
	if err != nil {
		return controlapi.MigrationStatus{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return controlapi.MigrationStatus{}, fmt.Errorf("the runner's control socket does not answer %s %s: %w", method, controlapi.MigrationPath, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return controlapi.MigrationStatus{}, err
	}
	var st controlapi.MigrationStatus
	jerr := json.Unmarshal(raw, &st)
	for _, code := range ok {
		if resp.StatusCode == code {
			if jerr != nil {
				return st, fmt.Errorf("the runner answered %s %s with %q, not a migration status", method, resp.Status, truncate(string(raw)))
			}
			return st, nil
		}
	}
	msg := st.Error
	if jerr != nil || msg == "" {
		msg = truncate(string(raw))
	}
	return st, &refusal{code: resp.StatusCode, msg: fmt.Sprintf("the runner refused %s %s (%s): %s", method, controlapi.MigrationPath, resp.Status, msg)}
}

// refusal is a runner's answer other than success.
type refusal struct {
	code int
	msg  string
}

func (r *refusal) Error() string { return r.msg }

func (r *runnerClient) get(ctx context.Context) (controlapi.MigrationStatus, error) {
	return r.do(ctx, http.MethodGet, nil, http.StatusOK)
}

func (r *runnerClient) put(ctx context.Context, req controlapi.MigrationRequest) (controlapi.MigrationStatus, error) {
	return r.do(ctx, http.MethodPut, req, http.StatusAccepted, http.StatusOK)
}

func (r *runnerClient) delete(ctx context.Context) (controlapi.MigrationStatus, error) {
	return r.do(ctx, http.MethodDelete, nil, http.StatusOK, http.StatusAccepted)
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
