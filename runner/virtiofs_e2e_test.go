package runner_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/runner/binaries"
	"github.com/virtpod/virtpod/tests/procstatus"
)

// shares are a guest's two virtio-fs shares as a pod would have them: web, a writable emptyDir
// the dev loop copies into (the fixture mounts it under its web root, /www/dev), and conf, a
// read-only ConfigMap-like directory owned by root.
type shares struct{ web, conf string }

// withShares makes the two directories where the runner's user reaches them, points the runner
// at Debian 13's virtiofsd (make qemu-next; Debian 12 has none) and returns the runner flags and
// the kernel arguments that make the fixture mount them.
func withShares(t *testing.T) (shares, []string, string) {
	t.Helper()
	bin := filepath.Join(filepath.Dir(qemuNext(t)), "virtiofsd")
	t.Setenv(binaries.EnvVirtiofsd, bin) // the runner reads it at its start
	dir, err := os.MkdirTemp(shareDir, "fs-")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o755)
	s := shares{web: filepath.Join(dir, "web"), conf: filepath.Join(dir, "conf")}
	for _, d := range []string{s.web, s.conf} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(s.web, int(vmv1.RunnerUID), int(vmv1.RunnerUID)); err != nil { // an emptyDir under fsGroup
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(s.web, "hello.html"), "hello from the pod\n")
	writeFile(t, filepath.Join(s.conf, "app.conf"), "colour=blue\n")
	return s, []string{"--filesystem=tag=web,path=" + s.web, "--filesystem=tag=conf,path=" + s.conf + ",readonly"},
		"virtpod.fs=web:/www/dev virtpod.fs=conf:/etc/app"
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkShares: both shares mounted in the guest, the writable one written by the guest and
// the read-only one refused; a file the pod side had before the boot, and one copied in while
// the guest runs (what Tilt's live_update does), served by the guest's HTTP server at once;
// every virtiofsd the runner's user, with no capability and no_new_privs.
func checkShares(t *testing.T, r *runnerProc, s shares, podIP string) {
	t.Helper()
	console := r.stdout.String()
	for _, want := range []string{"VIRTPOD-GUEST-FS web /www/dev mounted rw", "VIRTPOD-GUEST-FS conf /etc/app mounted ro"} {
		if !strings.Contains(console, want) {
			t.Errorf("the guest's console lacks %q:\n%s", want, tail(console, 20))
		}
	}
	if b, err := os.ReadFile(filepath.Join(s.web, "from-guest")); err != nil || strings.TrimSpace(string(b)) != "vm-e2e" {
		t.Errorf("what the guest wrote into the web share: %q, %v; want its hostname", b, err)
	}
	if _, err := os.Stat(filepath.Join(s.conf, "from-guest")); !os.IsNotExist(err) {
		t.Errorf("the guest wrote into the read-only share: %v", err)
	}
	// The guest's probe of a read-only share is quiet: a user reading the console (make demo's
	// share is a ConfigMap) sees no error of the fixture's own.
	if strings.Contains(console, "Read-only file system") {
		t.Errorf("the guest's console shows its write probe's error:\n%s", tail(console, 20))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if body, err := httpGet(ctx, "http://"+podIP+"/dev/hello.html"); err != nil || body != "hello from the pod\n" {
		t.Errorf("the guest served %q, %v; want the pod's hello.html", body, err)
	}
	copied := time.Now()
	writeFile(t, filepath.Join(s.web, "live.html"), "copied while the guest runs\n")
	var body string
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if body, err = httpGet(ctx, "http://"+podIP+"/dev/live.html"); err == nil && body == "copied while the guest runs\n" {
			break
		}
	}
	if body != "copied while the guest runs\n" {
		t.Errorf("a file copied into the share while the guest runs: served %q, %v", body, err)
	} else {
		t.Logf("a file copied into the share was served by the guest %v later", time.Since(copied).Round(10*time.Millisecond))
	}
	daemons := children(t, r.cmd.Process.Pid, "virtiofsd")
	if len(daemons) != 2 {
		t.Fatalf("%d virtiofsd under the runner, want one per share", len(daemons))
	}
	uid := strconv.FormatInt(vmv1.RunnerUID, 10)
	for _, st := range daemons {
		for _, want := range []string{"Uid:\t" + uid + "\t" + uid + "\t" + uid + "\t" + uid, "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1"} {
			if !strings.Contains(st, want) {
				t.Errorf("a virtiofsd's /proc status lacks %q:\n%s", want, st)
			}
		}
		// The pod budgets FilesystemOverheadMiB per share for its virtiofsd.
		hwm := procstatus.KiB(st, "VmHWM")
		if hwm == 0 || hwm > vmv1.FilesystemOverheadMiB<<10 {
			t.Errorf("a virtiofsd's peak RSS is %d KiB, want within the pod's %d MiB per share", hwm, vmv1.FilesystemOverheadMiB)
		}
		t.Logf("virtiofsd peak RSS %.1f MiB (the pod budgets %d MiB per share)", float64(hwm)/1024, vmv1.FilesystemOverheadMiB)
	}
}

// children are the /proc status of parent's children whose command line names name.
func children(t *testing.T, parent int, name string) []string {
	t.Helper()
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		st, err := os.ReadFile(filepath.Join(d, "status"))
		if err != nil || !strings.Contains(string(st), fmt.Sprintf("\nPPid:\t%d\n", parent)) {
			continue
		}
		if cmd, _ := os.ReadFile(filepath.Join(d, "cmdline")); strings.Contains(string(cmd), name) {
			out = append(out, string(st))
		}
	}
	return out
}
