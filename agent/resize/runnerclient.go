package resize

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/virtpod/virtpod/agent/podcontrol"
	"github.com/virtpod/virtpod/pkg/controlapi"
)

// Size is what the agent asks the runner for and reads back: the vCPUs and memory of the
// control API's PUT body (pkg/controlapi).
type Size = controlapi.SizeRequest

// putSize asks the runner on ctl's control socket for want and returns the size the guest has afterwards
// (known false when the runner did not say) and, when it did not get want, why.
func putSize(ctx context.Context, ctl podcontrol.Control, want Size, timeout time.Duration) (have Size, known bool, err error) {
	rc := podcontrol.NewClient(ctl, 0)
	defer rc.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	a, err := rc.PutSize(ctx, want)
	have, known = Size{CPUs: a.CPUs, Memory: a.Memory}, a.CPUs > 0 && validQuantity(a.Memory)
	var refused *podcontrol.RunnerRefusal
	switch {
	case errors.As(err, &refused):
		return have, known, err
	case err != nil:
		return Size{}, false, err
	case !known:
		return have, false, fmt.Errorf("the runner answered %s without a size", controlapi.SizePath)
	}
	return have, true, nil
}

func validQuantity(s string) bool {
	_, err := resource.ParseQuantity(s)
	return s != "" && err == nil
}
