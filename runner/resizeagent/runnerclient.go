package resizeagent

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
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/runner/podcontrol"
)

// Size is what the agent asks the runner for and reads back: the vCPUs and memory of the
// control API's PUT body (pkg/controlapi).
type Size = controlapi.SizeRequest

// putSize asks the runner on ctl's control socket for want and returns the size the guest has afterwards
// (known false when the runner did not say) and, when it did not get want, why.
func putSize(ctx context.Context, ctl podcontrol.Control, want Size, timeout time.Duration) (have Size, known bool, err error) {
	hc := ctl.HTTPClient(vmv1.ControlSocketName, 0)
	defer hc.CloseIdleConnections()
	body, _ := json.Marshal(want)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://runner"+controlapi.SizePath, bytes.NewReader(body))
	if err != nil {
		return Size{}, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.Is(err, podcontrol.ErrRefused) {
			return Size{}, false, fmt.Errorf("the runner's control socket: %w", errors.Unwrap(err))
		}
		if errors.As(err, &op) && op.Op == "dial" || errors.Is(err, os.ErrNotExist) {
			return Size{}, false, fmt.Errorf("the runner's control socket does not answer (a runner without live resize, or not started yet): %w", err)
		}
		return Size{}, false, fmt.Errorf("the runner did not answer: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return Size{}, false, err
	}
	var a controlapi.Size
	if err := json.Unmarshal(raw, &a); err != nil {
		return Size{}, false, fmt.Errorf("the runner answered %s with %q, not JSON", resp.Status, truncate(string(raw)))
	}
	have, known = Size{CPUs: a.CPUs, Memory: a.Memory}, a.CPUs > 0 && validQuantity(a.Memory)
	if resp.StatusCode == http.StatusOK {
		if !known {
			return have, false, fmt.Errorf("the runner answered %s without a size", resp.Status)
		}
		return have, true, nil
	}
	msg := a.Error
	if msg == "" {
		msg = "no reason given"
	}
	return have, known, fmt.Errorf("the runner refused (%s): %s", resp.Status, msg)
}

func validQuantity(s string) bool {
	_, err := resource.ParseQuantity(s)
	return s != "" && err == nil
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
