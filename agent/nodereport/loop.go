package nodereport

import (
	"context"
	"time"

	"go.uber.org/zap"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Loop probes every interval (first at once) and publishes. A failed publish is logged and retried at the next interval: the API server
// may be briefly away, and the heartbeat going stale is the signal others watch.
func Loop(ctx context.Context, interval time.Duration, probe func(context.Context) vmv1.HypervisorNodeStatus,
	pub *Publisher, log *zap.Logger) {
	var last vmv1.HypervisorNodeStatus
	first := true
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		st := probe(ctx)
		if first || !last.SameReport(&st) {
			log.Info("probed", zap.Any("kvm", st.KVM), zap.Any("emulation", st.Emulation), zap.Any("providers", st.Providers),
				zap.String("arch", st.Arch), zap.String("kernel", st.KernelVersion))
		}
		res, err := pub.Publish(ctx, st)
		if err != nil {
			log.Error("publishing the probe results failed; retrying at the next interval", zap.Error(err))
		} else {
			last, first = st, false
			if res.LabelsPatched || res.Created {
				log.Info("published", zap.Bool("labelsPatched", res.LabelsPatched), zap.Bool("created", res.Created))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
