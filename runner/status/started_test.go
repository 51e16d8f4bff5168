package status

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/virtpod/virtpod/pkg/controlapi"
)

// askStarted sends GET /v1/started with query to the control API and decodes the answer.
func askStarted(t *testing.T, h http.Handler, query string) (int, controlapi.Started, time.Duration) {
	t.Helper()
	start := time.Now()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, controlapi.StartedPath+query, nil))
	var st controlapi.Started
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
			t.Fatalf("%q: %v", rec.Body, err)
		}
	}
	return rec.Code, st, time.Since(start)
}

// TestStartedAnswersWhenTheGuestRuns: GET /v1/started waits while the guest prepares and
// answers as it starts, with since when; it answers at once for a guest that already ran or can
// no longer start, gives up after waitSeconds with the state, and refuses a bad wait.
func TestStartedAnswersWhenTheGuestRuns(t *testing.T) {
	board := New("qemu", "tcg")
	h := controlAPI(board)

	if code, st, took := askStarted(t, h, "?waitSeconds=1"); code != http.StatusOK || st.Started || st.State != StatePreparing || took < time.Second {
		t.Errorf("before the start, waiting 1 s: %d %+v after %v; want not started, preparing, after 1 s", code, st, took)
	}
	if code, st, took := askStarted(t, h, ""); code != http.StatusOK || st.Started || took > 500*time.Millisecond {
		t.Errorf("before the start, no wait: %d %+v after %v; want an answer at once", code, st, took)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		board.Set(StateStarting, "")
		time.Sleep(100 * time.Millisecond)
		board.Set(StateRunning, "")
	}()
	code, st, took := askStarted(t, h, "?waitSeconds=3600")
	if code != http.StatusOK || !st.Started || st.State != StateRunning || st.Since.IsZero() || took < 200*time.Millisecond || took > 2*time.Second {
		t.Errorf("through the start: %d %+v after %v; want started, running, with its time, as it starts", code, st, took)
	}
	board.Set(StatePaused, "")
	if code, again, took := askStarted(t, h, "?waitSeconds=60"); code != http.StatusOK || !again.Started || !again.Since.Equal(st.Since) || took > 500*time.Millisecond {
		t.Errorf("a guest that ran, now paused: %d %+v after %v; want started since %v, at once", code, again, took, st.Since)
	}

	failed := New("qemu", "tcg")
	h = controlAPI(failed)
	go func() { time.Sleep(100 * time.Millisecond); failed.Set(StateFailed, "no kernel") }()
	if code, st, took := askStarted(t, h, "?waitSeconds=60"); code != http.StatusOK || st.Started || !st.Ended || st.State != StateFailed || took > 2*time.Second {
		t.Errorf("a runner failing before the start: %d %+v after %v; want not started, ended, failed, as it fails", code, st, took)
	}
	for _, bad := range []string{"?waitSeconds=-1", "?waitSeconds=soon"} {
		if code, _, _ := askStarted(t, h, bad); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", bad, code)
		}
	}
}

// controlAPI is the control API as far as b serves it.
func controlAPI(b *Board) http.Handler {
	mux := http.NewServeMux()
	b.ControlRoutes(mux)
	return mux
}
