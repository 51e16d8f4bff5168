// Package churn is the soaks' shared schedule (tests/faults' make soak against simulated
// nodes, tests/e2e's make soak-node on the local cluster): how long to churn, and which power
// action a VM gets next, as merge patches of its spec.
package churn

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// Minutes is VIRTPOD_SOAK_MINUTES, 10 by default.
func Minutes(b testing.TB) float64 {
	s := os.Getenv("VIRTPOD_SOAK_MINUTES")
	if s == "" {
		return 10
	}
	m, err := strconv.ParseFloat(s, 64)
	if err != nil || m <= 0 {
		b.Fatalf("VIRTPOD_SOAK_MINUTES=%q: want a positive number of minutes", s)
	}
	return m
}

// Action is what a live VM gets next.
type Action string

const (
	Delete  Action = "delete"
	Start   Action = "start"   // runStrategy back to Always
	Stop    Action = "stop"    // runStrategy Halted
	Restart Action = "restart" // a restart request (runRequestedAt)
	Own     Action = ""        // the soak's own action (a resize, a migration)
)

// Next picks a live VM's next action: delete 2 in 10, stop (or start, when halted) 2 in 10,
// restart 2 in 10, and the soak's own 4 in 10.
func Next(rnd *rand.Rand, halted bool) Action {
	switch r := rnd.IntN(10); {
	case r < 2:
		return Delete
	case r < 4 && halted:
		return Start
	case r < 4:
		return Stop
	case r < 6:
		return Restart
	}
	return Own
}

// Patch is the merge patch of a VM's spec that carries a (Start, Stop or Restart).
func Patch(a Action) string {
	switch a {
	case Start:
		return `{"spec":{"runStrategy":"Always"}}`
	case Stop:
		return `{"spec":{"runStrategy":"Halted"}}`
	case Restart:
		return `{"spec":{"runRequestedAt":"` + time.Now().UTC().Format(time.RFC3339) + `"}}`
	}
	return ""
}
