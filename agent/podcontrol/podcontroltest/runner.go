package podcontroltest

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// ServeRunner serves h as a runner's control socket in dir (made if need be), as the device
// plugin's directory mounted into the runner holds it, until the test ends.
func ServeRunner(t *testing.T, dir string, h http.Handler) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, vmv1.ControlSocketName))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}
