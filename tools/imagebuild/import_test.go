package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/tests/containerdtest"
)

// TestImportIntoContainerd: --import puts the image into containerd's k8s.io namespace under its
// tag, unpacked, with the digest the archive has, and a container runs from it.
func TestImportIntoContainerd(t *testing.T) {
	needTool(t, "running containerd", "run the test as root", os.Geteuid() == 0)
	needTool(t, "/bin/busybox", "install busybox-static (tools/dev/ci/install-deps.sh)", fileExists("/bin/busybox"))
	needTool(t, "runc", "install runc (tools/dev/ci/install-deps.sh)", haveCommands("runc"))
	dir := containerdtest.Dir(t)
	sock := containerdtest.Start(t, dir)
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
