package runner_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtpod/virtpod/runner"
	"github.com/virtpod/virtpod/tests/loopback"
)

// TestGuestReadsCloudInitSeed: the runner builds a NoCloud seed from files (as the kubelet mounts
// them from the VM's Secret) and attaches it after the root disk; the guest finds it by its
// label, mounts it, and reports its meta-data and the user-data's digest. The data itself never
// reaches the runner's log.
func TestGuestReadsCloudInitSeed(t *testing.T) {
	guest := needGuestHost(t)
	files := t.TempDir()
	user := []byte("#cloud-config\nbootcmd:\n  - echo virtpod-seed-secret-7f3a\n")
	userPath, netPath := filepath.Join(files, "user-data"), filepath.Join(files, "network-config")
	if err := os.WriteFile(userPath, user, 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(netPath, []byte("version: 2\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	const uid = "5d1c1f9e-0000-4a4a-8b8b-123456789abc"
	r := startRunner(t, "", append(baseArgs(t, guest, "vm-seed"), "--network=none", "--http-addr="+loopback.FreeAddr(t),
		"--instance-id="+uid, "--cloud-init-user-data="+userPath, "--cloud-init-network-data="+netPath)...)
	// The guest prints the seed line before the ready marker; root=/dev/vda mounted as ext4
	// shows the seed did not take the root disk's place.
	r.waitMarker(t, bootTimeout)
	want := fmt.Sprintf("VIRTPOD-GUEST-SEED instance-id=%s hostname=vm-seed user-data-sha256=%x", uid, sha256.Sum256(user))
	if !strings.Contains(r.stdout.String(), want) {
		t.Fatalf("the guest console lacks %q:\n%s", want, tail(r.stdout.String(), 15))
	}
	seed := filepath.Join(r.stateDir, "cidata.iso")
	if st, err := os.Stat(seed); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("seed image in the state directory: %v %v, want mode 0600", st, err)
	}
	r.signal(t, syscall.SIGTERM)
	if code, msg := r.waitExit(t, 30*time.Second); code != runner.ExitOK {
		t.Fatalf("after SIGTERM: exit %d %q", code, msg)
	}
	if _, err := os.Stat(seed); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the seed image (the Secret's data) outlived the runner: %v", err)
	}
	if strings.Contains(r.stderr.String(), "virtpod-seed-secret-7f3a") {
		t.Error("the user-data appears in the runner's log")
	}
}

// TestCloudInitSeedMissingFile: a user-data file that is not there fails the start with the flag's
// name, before the hypervisor starts.
func TestCloudInitSeedMissingFile(t *testing.T) {
	guest := needGuestHost(t)
	missing := filepath.Join(t.TempDir(), "user-data")
	r := startRunner(t, "", append(baseArgs(t, guest, "vm-noseed"), "--network=none", "--http-addr="+loopback.FreeAddr(t),
		"--instance-id=i-1", "--cloud-init-user-data="+missing)...)
	code, msg := r.waitExit(t, 30*time.Second)
	if code != runner.ExitError || !strings.Contains(msg, "cloud-init seed: --cloud-init-user-data: open "+missing) {
		t.Fatalf("exit %d, termination message %q", code, msg)
	}
}
