package podcontroltest

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// Runner is a fake runner's control API (pkg/controlapi) for the executors' tests, the one they
// all use. Each endpoint, a method and a path, answers as the test set it: a canned answer, a
// refusal, or an answer made from the request. An endpoint given nothing answers 404
// {"error":"not found"}, as a runner from before that endpoint does. It records every request,
// and holds them on demand: a runner busy, or an agent stopped mid-request.
//
// The zero Runner is ready. Set it up before Serve: an executor may ask at once.
type Runner struct {
	mu       sync.Mutex
	answers  map[endpoint]func(Request) (int, any)
	requests []Request
	held     chan struct{} // while Hold: closed by Release
}

// endpoint is a method and a path of the control API.
type endpoint struct{ method, path string }

// Request is one request a Runner got.
type Request struct {
	Method string
	Path   string // without the query
	Query  url.Values
	Body   []byte
}

// Decode reads the request's JSON body into v.
func (r Request) Decode(v any) error { return json.Unmarshal(r.Body, v) }

// Answer has the runner answer method path with code and body (as JSON) from now on.
func (r *Runner) Answer(method, path string, code int, body any) {
	r.AnswerFunc(method, path, func(Request) (int, any) { return code, body })
}

// AnswerFunc has the runner answer method path from now on with what answer makes of each
// request: for a runner whose answer depends on what it is asked or on its own state.
func (r *Runner) AnswerFunc(method, path string, answer func(Request) (code int, body any)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.answers == nil {
		r.answers = map[endpoint]func(Request) (int, any){}
	}
	r.answers[endpoint{method, path}] = answer
}

// Fail has the runner refuse method path from now on with code and why, as the runner words a
// refusal: {"error": why}.
func (r *Runner) Fail(method, path string, code int, why string) {
	r.Answer(method, path, code, map[string]string{"error": why})
}

// Hold leaves every request from now on unanswered until Release, or until its client gives up;
// each is recorded at once.
func (r *Runner) Hold() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held == nil {
		r.held = make(chan struct{})
	}
}

// Release answers the held requests, with the answers set by then, and holds no more.
func (r *Runner) Release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held != nil {
		close(r.held)
		r.held = nil
	}
}

// Requests are the requests the runner got on method path, in the order it got them.
func (r *Runner) Requests(method, path string) []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	var got []Request
	for _, req := range r.requests {
		if req.Method == method && req.Path == path {
			got = append(got, req)
		}
	}
	return got
}

// Count is how many requests the runner got on method path.
func (r *Runner) Count(method, path string) int { return len(r.Requests(method, path)) }

func (r *Runner) ServeHTTP(w http.ResponseWriter, hr *http.Request) {
	body, _ := io.ReadAll(hr.Body)
	req := Request{Method: hr.Method, Path: hr.URL.Path, Query: hr.URL.Query(), Body: body}
	r.mu.Lock()
	r.requests = append(r.requests, req)
	held := r.held
	r.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-hr.Context().Done():
			return
		}
	}
	r.mu.Lock()
	answer := r.answers[endpoint{req.Method, req.Path}]
	r.mu.Unlock()
	code, out := http.StatusNotFound, any(map[string]string{"error": "not found"})
	if answer != nil {
		code, out = answer(req) // unlocked: an answer may take its time or read the API
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(out)
}

// Serve serves the runner on its control socket in dir (made if need be), as the device
// plugin's directory mounted into the runner holds it, until the test ends.
func (r *Runner) Serve(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, vmv1.ControlSocketName))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: r}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}
