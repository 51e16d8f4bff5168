package kubeapi

import (
	"sync"
	"testing"
	"time"
)

// Eventually retries check until it returns nil or timeout passes, then fails the test with
// the last error: how tests wait for controllers and clusters, never a bare sleep.
func Eventually(t testing.TB, what string, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s: %v", what, timeout, err)
}

// Clock is a clock tests move by hand, to skip back-offs and age reports.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts at now.
func NewClock() *Clock { return &Clock{t: time.Now()} }

// Now is the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
