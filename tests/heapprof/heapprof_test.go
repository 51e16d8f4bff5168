package heapprof

import (
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"strings"
	"testing"
)

// Against this process's own pprof endpoint: the collections succeed and the top names the
// in-use space of a profile kept on disk; a server without the endpoint is an error.
func TestCollectAndTop(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	if err := Collect(addr); err != nil {
		t.Fatal(err)
	}
	top, file, err := Top(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(file)
	if !strings.Contains(top, "Type: inuse_space") {
		t.Errorf("top of %s:\n%s", file, top)
	}
	bare := httptest.NewServer(http.NotFoundHandler())
	defer bare.Close()
	if err := Collect(strings.TrimPrefix(bare.URL, "http://")); err == nil {
		t.Error("a server without /debug/pprof/ gave no error")
	}
}
