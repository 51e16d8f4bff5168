package nodeagent

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/agent/facts"
	"github.com/virtpod/virtpod/agent/hotplug"
	"github.com/virtpod/virtpod/agent/migration"
	"github.com/virtpod/virtpod/agent/network"
	"github.com/virtpod/virtpod/agent/podcontrol"
	"github.com/virtpod/virtpod/agent/resize"
	"github.com/virtpod/virtpod/agent/snapshot"
	"github.com/virtpod/virtpod/agent/start"
	"github.com/virtpod/virtpod/agent/suspend"
	"github.com/virtpod/virtpod/agent/vmstats"
)

// executor is one of the agent's pod executors: whether it is on, whether the agent stops
// without it, and how it runs.
type executor struct {
	name  string
	on    bool
	vital bool
	run   func(context.Context) error
}

// executors are the agent's pod executors, each on its own log. The pod networks and live
// migration are vital: every runner waits for its network before its guest starts, and without
// the migration stream no VM can leave or reach the node, so the agent stops (and its pod
// restarts) rather than run on half-able. Without the guest-start report the VMs still reach
// Running, by the kubelet's startup probe, up to a second later.
func executors(o Options, a podcontrol.Agent, nx *network.Executor, vs *vmstats.Executor) []executor {
	return []executor{
		{"pod networks", true, true, nx.Run},
		{"guest start", true, false, (&start.Executor{Agent: a.Named("guest-start")}).Run},
		{"guest facts", o.GuestFacts, false, (&facts.Executor{Agent: a.Named("guest-facts")}).Run},
		{"suspend", o.Suspend, false, (&suspend.Executor{Agent: a.Named("suspend")}).Run},
		{"resize", o.Resize, false, (&resize.Executor{Agent: a.Named("resize")}).Run},
		{"snapshot", true, false, (&snapshot.Executor{Agent: a.Named("snapshot")}).Run},
		{"hotplug", true, false, (&hotplug.Executor{Agent: a.Named("hotplug")}).Run},
		{"vm stats", o.MetricsAddr != "", false, vs.Run},
		{"live migration", o.Migrate, true, (&migration.Executor{Agent: a.Named("migration"), Namespace: o.Namespace, PodIP: o.PodIP, Listen: o.MigrationListen}).Run},
	}
}

// runExecutors runs the executors that are on until ctx ends. The first vital one that stops with an
// error stops the agent (stop) and is sent on the channel; any other error is logged.
func runExecutors(ctx context.Context, stop func(), xs []executor, log *zap.Logger) <-chan error {
	fatal := make(chan error, 1)
	quit := func(err error) {
		select {
		case fatal <- err:
		default:
			log.Error("executor stopped", zap.Error(err))
		}
		stop()
	}
	for _, x := range xs {
		if !x.on {
			continue
		}
		go func() {
			if err := x.run(ctx); err != nil && x.vital {
				quit(fmt.Errorf("%s: %w", x.name, err))
			} else if err != nil {
				log.Error(x.name+" executor stopped", zap.Error(err))
			}
		}()
	}
	return fatal
}
