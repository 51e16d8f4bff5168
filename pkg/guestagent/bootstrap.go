package guestagent

import (
	"context"
	"encoding/base64"
	"encoding/json"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Where a guest's bootstrap says how it went: Cluster API's bootstrap providers write the
// sentinel once kubeadm succeeded (its bootstrap contract); cloud-init writes its result when it
// ends, listing its errors.
const (
	BootstrapSentinel = vmv1.MessageBootstrapSentinel
	CloudInitResult   = "/run/cloud-init/result.json"
)

// Bounds on what is read of the result: the file is a few hundred bytes.
const (
	maxResult    = 64 << 10
	maxErrors    = 8
	maxErrorText = 256
)

// BootstrapFiles are the paths Bootstrap reads; the defaults above, other ones in tests.
type BootstrapFiles struct{ Sentinel, Result string }

// DefaultBootstrapFiles are the paths in a guest.
var DefaultBootstrapFiles = BootstrapFiles{Sentinel: BootstrapSentinel, Result: CloudInitResult}

// Bootstrap reads, through the agent, whether the sentinel exists and cloud-init's result (a
// missing file is an absent fact, not an error; an agent that refuses the file commands gives
// nil). nil too while neither is there.
func (c *Client) Bootstrap(ctx context.Context, files BootstrapFiles) (*vmv1.GuestBootstrap, error) {
	var b vmv1.GuestBootstrap
	h, err := c.open(ctx, files.Sentinel)
	switch {
	case err == nil:
		b.Sentinel = true
		if err := c.close(ctx, h); err != nil {
			return nil, err
		}
	case !refused(err):
		return nil, err
	}
	raw, found, err := c.readFile(ctx, files.Result)
	if err != nil {
		return nil, err
	}
	if found {
		b.CloudInitDone = true
		b.CloudInitErrors = resultErrors(raw)
	}
	if !b.Sentinel && !b.CloudInitDone {
		return nil, nil
	}
	return &b, nil
}

// open opens path read-only in the guest; an AgentError when it is not there.
func (c *Client) open(ctx context.Context, path string) (int64, error) {
	var h int64
	err := c.Call(ctx, "guest-file-open", map[string]string{"path": path, "mode": "r"}, &h)
	return h, err
}

func (c *Client) close(ctx context.Context, h int64) error {
	if err := c.Call(ctx, "guest-file-close", map[string]int64{"handle": h}, nil); err != nil && !refused(err) {
		return err
	}
	return nil
}

// readFile reads at most maxResult bytes of path; found false when the guest has no such file.
func (c *Client) readFile(ctx context.Context, path string) ([]byte, bool, error) {
	h, err := c.open(ctx, path)
	if refused(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var r struct {
		Count int    `json:"count"`
		Buf   string `json:"buf-b64"`
	}
	readErr := c.Call(ctx, "guest-file-read", map[string]int64{"handle": h, "count": maxResult}, &r)
	if err := c.close(ctx, h); err != nil {
		return nil, false, err
	}
	if refused(readErr) {
		return nil, true, nil // there, but not readable: it ended, errors unknown
	}
	if readErr != nil {
		return nil, false, readErr
	}
	b, err := base64.StdEncoding.DecodeString(r.Buf)
	if err != nil || len(b) > maxResult {
		return nil, true, nil
	}
	return b, true, nil
}

// resultErrors are the errors cloud-init's result lists ({"v1": {"errors": [...]}}), cleaned
// and bounded; none for a result that does not parse.
func resultErrors(raw []byte) []string {
	var r struct {
		V1 struct {
			Errors []json.RawMessage `json:"errors"`
		} `json:"v1"`
	}
	if json.Unmarshal(raw, &r) != nil {
		return nil
	}
	var out []string
	for _, e := range r.V1.Errors {
		if len(out) == maxErrors {
			break
		}
		var s string
		if json.Unmarshal(e, &s) != nil {
			s = string(e)
		}
		out = append(out, cleanBounded(s, maxErrorText))
	}
	return out
}
