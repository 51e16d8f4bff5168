// Package containerdtest runs a private containerd for a test: its own root, state and socket,
// no CRI, gone when the test ends.
package containerdtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/virtpod/virtpod/tests/prereq"
)

// Dir is the local cluster's containerd build ($VIRTPOD_CACHE/containerd-*) with containerd,
// ctr and the runc shim; the test skips, or fails under CI, without one.
func Dir(t testing.TB) string {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(prereq.Cache(), "containerd-*"))
	for _, d := range dirs {
		if exists(filepath.Join(d, "containerd")) && exists(filepath.Join(d, "ctr")) && exists(filepath.Join(d, "containerd-shim-runc-v2")) {
			return d
		}
	}
	prereq.Need(t, false, "no containerd, ctr and shim in "+prereq.Cache()+"/containerd-*: run `make containerd`")
	return ""
}

// Start runs containerd from dir and returns its socket.
func Start(t testing.TB, dir string) string {
	t.Helper()
	prereq.Need(t, os.Geteuid() == 0, "running containerd needs root")
	work := t.TempDir()
	sock := filepath.Join(work, "containerd.sock")
	cfg := `version = 3
root = "` + filepath.Join(work, "root") + `"
state = "` + filepath.Join(work, "state") + `"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "` + sock + `"
[ttrpc]
  address = "` + sock + `.ttrpc"
`
	if err := os.WriteFile(filepath.Join(work, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(work, "containerd.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(dir, "containerd"), "--config", filepath.Join(work, "config.toml"))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH")) // the shim
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		log.Close()
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return sock
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("containerd did not serve %s:\n%s", sock, b)
		}
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
