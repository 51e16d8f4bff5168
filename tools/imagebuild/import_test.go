package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// containerdDir finds the local cluster's containerd build ($VIRTPOD_CACHE/containerd-*), or
// skips: `make test` does not build containerd, so this check runs where the cluster was built.
func containerdDir(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("VIRTPOD_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "virtpod")
	}
	dirs, _ := filepath.Glob(filepath.Join(cache, "containerd-*"))
	for _, d := range dirs {
		if fileExists(filepath.Join(d, "containerd")) && fileExists(filepath.Join(d, "ctr")) && fileExists(filepath.Join(d, "containerd-shim-runc-v2")) {
			return d
		}
	}
	needTool(t, "no containerd, ctr and shim in "+cache+"/containerd-*", "run `make containerd`", false)
	return ""
}

// startContainerd runs a private containerd (its own root, state and socket; no CRI) for the
// test's life and returns its socket.
func startContainerd(t *testing.T, dir string) string {
	t.Helper()
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
	log, err := os.Create(filepath.Join(work, "containerd.log"))
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
			b, _ := os.ReadFile(filepath.Join(work, "containerd.log"))
			t.Fatalf("containerd did not serve %s:\n%s", sock, b)
		}
	}
}

// TestImportIntoContainerd: --import puts the image into containerd's k8s.io namespace under its
// tag, unpacked, with the digest the archive has, and a container runs from it.
func TestImportIntoContainerd(t *testing.T) {
	needTool(t, "running containerd", "run the test as root", os.Geteuid() == 0)
	needTool(t, "/bin/busybox", "install busybox-static (tools/ci/install-deps.sh)", fileExists("/bin/busybox"))
	needTool(t, "runc", "install runc (tools/ci/install-deps.sh)", haveCommands("runc"))
	dir := containerdDir(t)
	sock := startContainerd(t, dir)
	ctr := filepath.Join(dir, "ctr")
	const tag = "localhost/virtpod/toolbox:import-test"
	img, _ := build(t, "toolbox", "--tag="+tag, "--import", "--containerd-address="+sock, "--ctr="+ctr)

	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(ctr, append([]string{"-a", sock, "-n", "k8s.io"}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// containerd writes its own manifest for a docker archive; the config (the image ID) is ours.
	var manifest string
	check := run("images", "check")
	for _, line := range strings.Split(check, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == tag {
			manifest = f[2]
		}
	}
	if manifest == "" || !strings.Contains(check, "complete") || !strings.HasSuffix(strings.TrimSpace(check), "true") {
		t.Fatalf("ctr images check: want %s complete and unpacked:\n%s", tag, check)
	}
	var m struct {
		Config struct{ Digest string }
	}
	if err := json.Unmarshal([]byte(run("content", "get", manifest)), &m); err != nil {
		t.Fatal(err)
	}
	if id, _ := img.ConfigName(); m.Config.Digest != id.String() {
		t.Errorf("imported image config %s, want %s", m.Config.Digest, id)
	}
	if out := run("run", "--rm", tag, "imagebuild-test", "sh", "-c", "echo ran in $(cat /etc/group | head -1)"); strings.TrimSpace(out) != "ran in root:x:0:" {
		t.Errorf("container output %q", out)
	}
}
