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

// Parallel runs write(0..n-1) from 16 goroutines, as benchmarks create objects, reporting each
// error with t.Error (so it may run off the test's goroutine).
func Parallel(t testing.TB, n int, write func(i int) error) {
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				if err := write(i); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}
