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
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Size is the runner control API's size (GET and PUT /v1/size): cpus the guest has online,
// memory as a quantity such as 768Mi.
type Size struct {
	CPUs   int32  `json:"cpus"`
	Memory string `json:"memory"`
}

// sizeAnswer is the runner's answer: the size, or an error naming the field, with the size
// reached so far when the guest did not take all of it in time.
type sizeAnswer struct {
	CPUs   int32  `json:"cpus"`
	Memory string `json:"memory"`
	Error  string `json:"error"`
}

// putSize asks the runner at socket for want and returns the size the guest has afterwards
// (known false when the runner did not say) and, when it did not get want, why.
func putSize(ctx context.Context, socket string, want Size, timeout time.Duration) (have Size, known bool, err error) {
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	}}
	defer hc.CloseIdleConnections()
	body, _ := json.Marshal(want)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://runner/v1/size", bytes.NewReader(body))
	if err != nil {
		return Size{}, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return Size{}, false, fmt.Errorf("the runner's control socket does not answer (a runner without live resize, or not started yet): %w", err)
		}
		return Size{}, false, fmt.Errorf("the runner did not answer: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return Size{}, false, err
	}
	var a sizeAnswer
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
