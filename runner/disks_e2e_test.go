package runner_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtpod/virtpod/agent/podcontrol"
	"github.com/virtpod/virtpod/pkg/controlapi"
	"github.com/virtpod/virtpod/runner"
	"github.com/virtpod/virtpod/tests/loopback"
)

// loopDevice backs a block device with a 16 MiB file that starts with word, as a Block claim's
// device would be; it is detached when the test ends.
func loopDevice(t *testing.T, word string) (dev, file string) {
	t.Helper()
	file = filepath.Join(t.TempDir(), "block.img")
	b := make([]byte, 16<<20)
	copy(b, word)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", file).CombinedOutput()
	if err != nil {
		need(t, false, "a loop device (losetup): "+strings.TrimSpace(string(out)))
	}
	dev = strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
	return dev, file
}

// kubeletDir lays files out as the kubelet mounts a ConfigMap or Secret: each key a symlink
// into a timestamped folder through ..data.
func kubeletDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	ts := filepath.Join(dir, "..2026_11_30_00_00_00.000000001")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(ts, k), []byte(v), 0o400); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func startsWith(t *testing.T, file, word string) bool {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, len(word))
	_, _ = f.Read(b)
	return string(b) == word
}

func wantLines(t *testing.T, console string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(console, l+"\n") {
			t.Errorf("the guest console lacks %q", l)
		}
	}
	if t.Failed() {
		t.Fatalf("guest console:\n%s", tail(console, 30))
	}
}

// TestGuestSeesDataDisks boots the guest with a disk of every kind, in a second run as a new pod
// would: each is found by its serial with its size and contents; what the guest wrote to the
// Filesystem claim's disk file and to the block device is on the host after it powered off and
// in the next run, while the emptyDisk starts blank again; the claim's disk file is made once.
// The block device sits on a hotplug slot: the first run also attaches and detaches disks
// (checkHotplug).
func TestGuestSeesDataDisks(t *testing.T) {
	guest := needGuestHost(t)
	dev, devFile := loopDevice(t, "from-host")
	claim, scratch := t.TempDir(), t.TempDir()
	config := kubeletDir(t, map[string]string{"app.conf": "port=8080", "mode": "blue"})
	secret := kubeletDir(t, map[string]string{"password": "s3cret-7f3a"})
	image := filepath.Join(t.TempDir(), "root.img")
	img := make([]byte, 4<<20)
	copy(img, "from-image")
	if err := os.WriteFile(image, img, 0o444); err != nil {
		t.Fatal(err)
	}
	disks := []string{
		"--disk=name=data,kind=file,path=" + claim + ",size-mib=32",
		"--disk=name=raw,kind=block,path=" + dev + ",slot=0", "--hotplug-slots=4",
		"--disk=name=scratch,kind=empty,path=" + scratch + ",size-mib=8",
		"--disk=name=config,kind=files,path=" + config + ",readonly",
		"--disk=name=creds,kind=files,path=" + secret + ",readonly",
		"--disk=name=tools,kind=image,path=" + image + ",readonly",
	}
	boot := func(kernelArgs string) *runnerProc {
		args := baseArgs(t, guest, "vm-disks")
		for i, a := range args {
			if strings.HasPrefix(a, "--kernel-args=") {
				args[i] = "--kernel-args=rw " + kernelArgs
			}
		}
		r := startRunner(t, "", append(append(args, "--network=none", "--http-addr="+loopback.FreeAddr(t)), disks...)...)
		r.waitMarker(t, bootTimeout)
		if kernelArgs != "" { // the first run backs up its data disks and hotplugs (PUT /v1/backup, /v1/hotplug)
			checkBackup(t, r, filepath.Join(claim, "disk.img"), dev)
			checkHotplug(t, r)
		}
		r.signal(t, syscall.SIGTERM)
		if code, msg := r.waitExit(t, 60*time.Second); code != runner.ExitOK {
			t.Fatalf("after SIGTERM: exit %d %q", code, msg)
		}
		return r
	}

	r := boot("virtpod.disk-write=data:first-boot virtpod.disk-write=raw:from-guest virtpod.disk-write=scratch:gone virtpod.disk-write=hot:" + hotWord)
	wantLines(t, r.stdout.String(),
		"VIRTPOD-GUEST-DISK serial=data sectors=65536 ro=0 head=",
		"VIRTPOD-GUEST-DISK serial=raw sectors=32768 ro=0 head=from-host",
		"VIRTPOD-GUEST-DISK serial=scratch sectors=16384 ro=0 head=",
		"VIRTPOD-GUEST-DISK-FILE serial=config name=app.conf content=port=8080",
		"VIRTPOD-GUEST-DISK-FILE serial=config name=mode content=blue",
		"VIRTPOD-GUEST-DISK-FILE serial=creds name=password content=s3cret-7f3a",
		"VIRTPOD-GUEST-DISK serial=tools sectors=8192 ro=1 head=from-image",
		"VIRTPOD-GUEST-DISK-WROTE serial=data word=first-boot",
		"VIRTPOD-GUEST-DISK-WROTE serial=raw word=from-guest",
	)
	if !strings.Contains(r.stdout.String(), "ro=1 label=config\n") || !strings.Contains(r.stdout.String(), "ro=1 label=creds\n") {
		t.Errorf("the ConfigMap and Secret disks are not read-only ISO 9660 disks labelled with their names:\n%s", tail(r.stdout.String(), 20))
	}
	disk := filepath.Join(claim, "disk.img")
	if !startsWith(t, disk, "first-boot") || !startsWith(t, devFile, "from-guest") {
		t.Fatal("what the guest wrote and synced is not on the claim's disk file and the block device")
	}
	if fi, _ := os.Stat(disk); fi.Size() != 32<<20 || fi.Sys().(*syscall.Stat_t).Blocks*512 > 1<<20 {
		t.Errorf("the claim's disk file: %d bytes, %d allocated; want 32 MiB, sparse", fi.Size(), fi.Sys().(*syscall.Stat_t).Blocks*512)
	}
	if isos, _ := filepath.Glob(filepath.Join(r.stateDir, "disk-*.iso")); len(isos) != 0 {
		t.Errorf("ConfigMap and Secret disks (their data) outlived the runner: %v", isos)
	}
	if !strings.Contains(r.stderr.String(), `"name":"data","kind":"file"`) || !strings.Contains(r.stderr.String(), `"created":true`) {
		t.Errorf("the first run did not make the claim's disk file:\n%s", tail(r.stderr.String(), 20))
	}

	r = boot("")
	wantLines(t, r.stdout.String(),
		"VIRTPOD-GUEST-DISK serial=data sectors=65536 ro=0 head=first-boot",
		"VIRTPOD-GUEST-DISK serial=raw sectors=32768 ro=0 head=from-guest",
		"VIRTPOD-GUEST-DISK serial=scratch sectors=16384 ro=0 head=",
	)
	if !strings.Contains(r.stderr.String(), `"created":false`) {
		t.Errorf("the second run made the claim's disk file again:\n%s", tail(r.stderr.String(), 20))
	}
}

// TestRootDiskOnClaim: a root disk on a Filesystem claim is filled from the image on the first
// boot, and a guest killed after syncing finds its writes at the next boot, as a new pod on the
// same claim; the image is never written and the fill is not repeated.
func TestRootDiskOnClaim(t *testing.T) {
	guest := needGuestHost(t)
	claim := t.TempDir()
	image := filepath.Join(guest, "disk", "root.img")
	before := sum(t, image)
	state := filepath.Join(t.TempDir(), "guest.state")
	// boot starts a runner on the claim, with extra flags; a resume has no boot to wait for.
	boot := func(extra ...string) *runnerProc {
		args := baseArgs(t, guest, "vm-root")
		for i, a := range args {
			switch {
			case strings.HasPrefix(a, "--kernel-args="):
				args[i] = "--kernel-args=rw virtpod.boot-count virtpod.heartbeat"
			case strings.HasPrefix(a, "--disk-size-mib="):
				args[i] = "--disk-size-mib=96"
			}
		}
		args = append(args, "--network=none", "--http-addr="+loopback.FreeAddr(t), "--root-volume=kind=file,path="+claim)
		r := startRunner(t, "", append(args, slices.DeleteFunc(extra, func(a string) bool { return a == "" })...)...)
		if !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--resume-from=") }) {
			r.waitMarker(t, bootTimeout)
		}
		return r
	}
	r := boot("")
	wantLines(t, r.stdout.String(), "VIRTPOD-GUEST-BOOTS 1")
	// No place for its state: a suspend is refused, and the guest runs on.
	if st, err := controlOf(r).Suspend(context.Background()); err == nil || !strings.Contains(err.Error(), "no --suspend-to") || st.State != controlapi.SuspendNone {
		t.Errorf("a suspend without --suspend-to: %+v, %v", st, err)
	}
	if !strings.Contains(r.stderr.String(), `"filledNow":true`) {
		t.Errorf("the first boot did not fill the claim:\n%s", tail(r.stderr.String(), 20))
	}
	// The guest synced its count; QEMU dies without a chance to flush anything itself.
	if err := syscall.Kill(r.qemuPID(t), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code, _ := r.waitExit(t, 30*time.Second); code == runner.ExitOK {
		t.Fatal("a killed QEMU ended as a clean stop")
	}
	if fi, err := os.Stat(filepath.Join(claim, "disk.img")); err != nil || fi.Size() != 96<<20 {
		t.Fatalf("the claim's root disk: %v, %v; want 96 MiB (--disk-size-mib)", fi, err)
	}

	r = boot("--suspend-to=" + state)
	wantLines(t, r.stdout.String(), "VIRTPOD-GUEST-BOOTS 2")
	if !strings.Contains(r.stderr.String(), `"filledNow":false`) {
		t.Errorf("the second boot filled the claim again:\n%s", tail(r.stderr.String(), 20))
	}

	// Suspend: the guest's state goes to a file and the runner ends; a new runner resumes it
	// from there, and the guest goes on counting its heartbeat without booting again.
	waitConsole(t, r, 30*time.Second, func(out string) bool { return lastBeat(out) >= 10 })
	beat := lastBeat(r.stdout.String())
	st, err := controlOf(r).Suspend(context.Background())
	if err != nil || st.State != controlapi.SuspendSaved || st.Bytes <= 0 {
		t.Fatalf("suspend: %+v, %v", st, err)
	}
	if code, msg := r.waitExit(t, 30*time.Second); code != runner.ExitOK || msg != runner.MessageSuspended+state {
		t.Fatalf("after the suspend: exit %d %q", code, msg)
	}
	saved := lastBeat(r.stdout.String())
	if fi, err := os.Stat(state); err != nil || fi.Size() != st.Bytes || saved < beat {
		t.Fatalf("the saved state: %v, %v (%d bytes said); heartbeat %d before, %d at the save", fi, err, st.Bytes, beat, saved)
	}
	t.Logf("suspended a 256 MiB guest: %d bytes of state, heartbeat %d", st.Bytes, saved)
	r = boot("--resume-from="+state, "--suspend-to="+state)
	waitConsole(t, r, 60*time.Second, func(out string) bool { return lastBeat(out) > saved })
	if out := r.stdout.String(); strings.Contains(out, "VIRTPOD-GUEST-BOOTS") || strings.Contains(out, marker) || lastBeat(out) <= saved {
		t.Fatalf("the resumed guest booted again, or its heartbeat did not go on from %d:\n%s", saved, tail(out, 10))
	}
	// The loaded state is gone: the guest's disks have moved on from it.
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("the state a resume loaded is still there (%v)", err)
	}
	r.signal(t, syscall.SIGTERM)
	if code, msg := r.waitExit(t, 60*time.Second); code != runner.ExitOK {
		t.Fatalf("after SIGTERM: exit %d %q", code, msg)
	}
	if !bytes.Equal(sum(t, image), before) {
		t.Fatal("the root-disk image was written")
	}
}

// TestRootClaimWithoutDisk: a claim with no disk and no image to fill it fails the start,
// saying what to give, before the hypervisor starts.
func TestRootClaimWithoutDisk(t *testing.T) {
	guest := needGuestHost(t)
	var args []string
	for _, a := range baseArgs(t, guest, "vm-noroot") {
		if !strings.HasPrefix(a, "--root-disk=") && !strings.HasPrefix(a, "--disk-size-mib=") {
			args = append(args, a)
		}
	}
	r := startRunner(t, "", append(args, "--network=none", "--http-addr="+loopback.FreeAddr(t), "--root-volume=kind=file,path="+t.TempDir())...)
	code, msg := r.waitExit(t, 30*time.Second)
	if code != runner.ExitError || !strings.Contains(msg, "the claim holds no disk.img and there is no image to fill it with: give the VM rootDisk.image") {
		t.Fatalf("exit %d, termination message %q", code, msg)
	}
}

func sum(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return s[:]
}

// controlOf is a control API client of r's control socket, as the node agent has.
func controlOf(r *runnerProc) *podcontrol.Client {
	return podcontrol.NewClient(podcontrol.Control{Root: filepath.Dir(filepath.Dir(r.control)), Device: filepath.Base(filepath.Dir(r.control))}, 2*time.Minute)
}

// lastBeat is the number of the last VIRTPOD-HB line in out, 0 if none.
func lastBeat(out string) int {
	i := strings.LastIndex(out, "VIRTPOD-HB ")
	if i < 0 {
		return 0
	}
	n, _ := strconv.Atoi(strings.Fields(out[i+len("VIRTPOD-HB "):] + " ")[0])
	return n
}

// waitConsole waits until ok holds for r's console output.
func waitConsole(t *testing.T, r *runnerProc, d time.Duration, ok func(string) bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if ok(r.stdout.String()) {
			return
		}
	}
	t.Fatalf("not within %v; the console ends:\n%s", d, tail(r.stdout.String(), 10))
}

// TestResumeFromBadState: a state QEMU cannot load (here, not a state at all) ends the runner
// with exit 9 and the cause, and the file is kept; no guest boots in its place.
func TestResumeFromBadState(t *testing.T) {
	guest := needGuestHost(t)
	claim := t.TempDir()
	state := filepath.Join(t.TempDir(), "guest.state")
	if err := os.WriteFile(state, []byte("not a QEMU migration stream"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startRunner(t, "", append(baseArgs(t, guest, "vm-bad-state"), "--network=none", "--http-addr="+loopback.FreeAddr(t),
		"--root-volume=kind=file,path="+claim, "--resume-from="+state)...)
	code, msg := r.waitExit(t, 60*time.Second)
	if code != runner.ExitIncomingFailed || !strings.Contains(msg, "resume from "+state+" failed") || !strings.Contains(msg, "the saved state is kept") {
		t.Fatalf("exit %d %q", code, msg)
	}
	if b, err := os.ReadFile(state); err != nil || string(b) != "not a QEMU migration stream" {
		t.Errorf("the state after a failed resume: %q, %v", b, err)
	}
	if strings.Contains(r.stdout.String(), marker) {
		t.Errorf("a guest booted in place of the one that could not be resumed")
	}
}
