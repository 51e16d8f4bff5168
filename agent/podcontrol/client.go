package podcontrol

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
)

// Client speaks the runner's control API (pkg/controlapi) on one pod's control socket: the
// node agent's resize and migration executors both use it, so the wire format and how the
// runner's answers become errors are written once.
type Client struct {
	ctl Control
	hc  *http.Client
}

// NewClient talks to ctl's control socket; timeout bounds each request (0: only the context).
func NewClient(ctl Control, timeout time.Duration) *Client {
	return &Client{ctl: ctl, hc: ctl.HTTPClient(vmv1.ControlSocketName, timeout)}
}

// Control is the control directory the client talks to.
func (c *Client) Control() Control { return c.ctl }

// Close drops the client's idle connection.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// RunnerRefusal is a runner's answer other than success, in the runner's own words.
type RunnerRefusal struct {
	Code int
	msg  string
}

func (r *RunnerRefusal) Error() string { return r.msg }

// PutSize asks for a new guest size; the size returned is what the runner says the guest has,
// also when it refused.
func (c *Client) PutSize(ctx context.Context, want controlapi.SizeRequest) (controlapi.Size, error) {
	var got controlapi.Size
	err := c.call(ctx, http.MethodPut, controlapi.SizePath, want, &got, http.StatusOK)
	return got, err
}

// Migration reads either side's migration progress.
func (c *Client) Migration(ctx context.Context) (controlapi.MigrationStatus, error) {
	var st controlapi.MigrationStatus
	err := c.call(ctx, http.MethodGet, controlapi.MigrationPath, nil, &st, http.StatusOK)
	return st, err
}

// StartMigration asks the source runner to send the guest.
func (c *Client) StartMigration(ctx context.Context, req controlapi.MigrationRequest) (controlapi.MigrationStatus, error) {
	var st controlapi.MigrationStatus
	err := c.call(ctx, http.MethodPut, controlapi.MigrationPath, req, &st, http.StatusAccepted, http.StatusOK)
	return st, err
}

// StopMigration cancels the source's migration or, after completion, resumes the guest there.
func (c *Client) StopMigration(ctx context.Context) (controlapi.MigrationStatus, error) {
	var st controlapi.MigrationStatus
	err := c.call(ctx, http.MethodDelete, controlapi.MigrationPath, nil, &st, http.StatusOK, http.StatusAccepted)
	return st, err
}

// Guest reads what the guest agent says (its channel, whether an agent answers, the facts). A
// runner from before the guest agent answers 404, which is a RunnerRefusal.
func (c *Client) Guest(ctx context.Context) (controlapi.Guest, error) {
	var g controlapi.Guest
	err := c.call(ctx, http.MethodGet, controlapi.GuestPath, nil, &g, http.StatusOK)
	return g, err
}

// Stats asks the runner for its guest's counters (GET /v1/stats).
func (c *Client) Stats(ctx context.Context) (controlapi.Stats, error) {
	var st controlapi.Stats
	err := c.call(ctx, http.MethodGet, controlapi.StatsPath, nil, &st, http.StatusOK)
	return st, err
}

// Started asks the runner whether its guest runs, waiting up to wait (whole seconds, at most
// controlapi.MaxStartedWaitSeconds) for it to start. A runner from before the question answers
// 404, which is a RunnerRefusal.
func (c *Client) Started(ctx context.Context, wait time.Duration) (controlapi.Started, error) {
	var st controlapi.Started
	err := c.call(ctx, http.MethodGet, controlapi.StartedPath+"?waitSeconds="+strconv.Itoa(int(wait/time.Second)), nil, &st, http.StatusOK)
	return st, err
}

// Suspend asks the runner to save its guest's state (to its --suspend-to) and end; it returns
// once the state is saved, or with the runner's refusal or failure (the guest then runs on).
func (c *Client) Suspend(ctx context.Context) (controlapi.SuspendStatus, error) {
	var st controlapi.SuspendStatus
	err := c.call(ctx, http.MethodPut, controlapi.SuspendPath, nil, &st, http.StatusOK)
	return st, err
}

// Drives lists the guest's drives and their sizes.
func (c *Client) Drives(ctx context.Context) ([]controlapi.Drive, error) {
	var d []controlapi.Drive
	err := c.call(ctx, http.MethodGet, controlapi.DrivesPath, nil, &d, http.StatusOK)
	return d, err
}

// Backup asks the runner to copy the guest's drives onto the NBD targets req names, at one
// instant; it returns once the copy is complete, or with the runner's refusal or failure (its
// status then says why).
func (c *Client) Backup(ctx context.Context, req controlapi.BackupRequest) (controlapi.BackupStatus, error) {
	var st controlapi.BackupStatus
	err := c.call(ctx, http.MethodPut, controlapi.BackupPath, req, &st, http.StatusOK)
	return st, err
}

// Hotplug asks the runner to bring the guest's hotplug slots to req; it returns what the guest
// has then, once it got there or a disk failed or was not released in time (the status's error
// says which), or with the runner's refusal.
func (c *Client) Hotplug(ctx context.Context, req controlapi.HotplugRequest) (controlapi.HotplugStatus, error) {
	var st controlapi.HotplugStatus
	err := c.call(ctx, http.MethodPut, controlapi.HotplugPath, req, &st, http.StatusOK)
	return st, err
}

// call sends body (nil: none) as JSON and decodes the answer into out, also when the status is
// not one of ok: the runner's view comes with its refusals too.
func (c *Client) call(ctx context.Context, method, path string, body, out any, ok ...int) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://runner"+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return unanswered(method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return err
	}
	jerr := json.Unmarshal(raw, out)
	if slices.Contains(ok, resp.StatusCode) {
		if jerr != nil {
			return fmt.Errorf("the runner answered %s %s with %s %q, not JSON", method, path, resp.Status, truncate(string(raw)))
		}
		return nil
	}
	var reason struct {
		Error string `json:"error"`
	}
	msg := truncate(string(raw))
	if json.Unmarshal(raw, &reason) == nil && reason.Error != "" {
		msg = reason.Error
	}
	if msg == "" {
		msg = "no reason given"
	}
	return &RunnerRefusal{resp.StatusCode, fmt.Sprintf("the runner refused %s %s (%s): %s", method, path, resp.Status, msg)}
}

// unanswered says why a request got no answer: a socket not there (a runner that does not serve
// the control API, or not started yet) reads differently from one that broke off.
func unanswered(method, path string, err error) error {
	var op *net.OpError
	switch {
	case errors.Is(err, ErrRefused):
		return fmt.Errorf("the runner's control socket: %w", errors.Unwrap(err))
	case errors.As(err, &op) && op.Op == "dial" || errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("the runner's control socket does not answer %s %s (a runner without it, or not started yet): %w", method, path, err)
	}
	return fmt.Errorf("the runner did not answer %s %s: %w", method, path, err)
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
