package nodeagent

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/virtpod/virtpod/agent/network"
	"github.com/virtpod/virtpod/agent/podcontrol"
	"github.com/virtpod/virtpod/agent/vmstats"
)

// TestVitalExecutorStopsTheAgent: an executor that is off never runs; one that is not vital
// stopping with an error is logged and the others run on; the first vital one to stop with an
// error stops the agent and is what it ends with.
func TestVitalExecutorStopsTheAgent(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	failVital := make(chan struct{})
	ranOff := make(chan struct{}, 1)
	fatal := runExecutors(ctx, stop, []executor{
		{"off", false, true, func(context.Context) error { ranOff <- struct{}{}; return nil }},
		{"minor", true, false, func(context.Context) error { return errors.New("minor broke") }},
		{"vital", true, true, func(context.Context) error { <-failVital; return errors.New("vital broke") }},
		{"steady", true, true, func(ctx context.Context) error { <-ctx.Done(); return nil }},
	}, zap.New(core))
	deadline := time.Now().Add(5 * time.Second)
	for logs.FilterMessage("minor executor stopped").Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if logs.FilterMessage("minor executor stopped").Len() != 1 || ctx.Err() != nil {
		t.Fatalf("a minor executor's error: logged %d times, agent stopped: %v; want logged once, running", logs.FilterMessage("minor executor stopped").Len(), ctx.Err())
	}
	close(failVital)
	select {
	case err := <-fatal:
		if err == nil || err.Error() != "vital: vital broke" {
			t.Errorf("the agent ended with %v, want the vital executor's error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a vital executor's error did not stop the agent")
	}
	if ctx.Err() == nil {
		t.Error("the agent's context was not cancelled")
	}
	select {
	case <-ranOff:
		t.Error("an executor that is off ran")
	default:
	}
}

// TestExecutorTable: the flags turn off only what may be off; the networks and the migration
// stream are vital.
func TestExecutorTable(t *testing.T) {
	on := map[string]bool{}
	vital := map[string]bool{}
	for _, x := range executors(Options{}, podcontrol.Agent{Log: zap.NewNop()}, &network.Executor{}, &vmstats.Executor{}) {
		on[x.name], vital[x.name] = x.on, x.vital
	}
	for name, want := range map[string]bool{"pod networks": true, "guest start": true, "guest facts": false, "suspend": false, "resize": false, "snapshot": true, "hotplug": true, "vm stats": false, "live migration": false} {
		if on[name] != want {
			t.Errorf("%s with every flag off: on %v, want %v", name, on[name], want)
		}
	}
	for name, want := range map[string]bool{"pod networks": true, "guest start": false, "guest facts": false, "suspend": false, "resize": false, "snapshot": false, "hotplug": false, "vm stats": false, "live migration": true} {
		if vital[name] != want {
			t.Errorf("%s: vital %v, want %v", name, vital[name], want)
		}
	}
}
