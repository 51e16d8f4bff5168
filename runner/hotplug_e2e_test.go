package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtpod/virtpod/agent/podcontrol"
	"github.com/virtpod/virtpod/pkg/controlapi"
)

// The hotplug checks (PUT /v1/hotplug): the attachment pod's part is played by qemu-nbd, which
// serves a disk file on the disk's socket in the runner's control directory.

// hotWord is what the guest writes to the disk hot when it is attached (virtpod.disk-write).
const hotWord = "hot-word"

// checkHotplug drives r's guest, started with disk raw on slot 0 of its hotplug slots: a disk
// served over NBD is attached, seen by the guest, written and detached, and holds what the guest
// wrote; the boot disk raw leaves and comes back from its own device on another slot; bad
// requests are refused naming the field, and a disk the pod does not hold needs a socket.
func checkHotplug(t *testing.T, r *runnerProc) {
	t.Helper()
	need(t, haveBinary("qemu-nbd"), "needs qemu-nbd (qemu-utils)")
	c := controlOf(r)
	raw := controlapi.HotplugDisk{Name: "raw", Slot: 0}
	if st := getHotplug(t, r); !slotsAre(st, "raw@0") {
		t.Fatalf("GET %s at start: %+v", controlapi.HotplugPath, st)
	}
	file := filepath.Join(t.TempDir(), "hot.img")
	b := make([]byte, 16<<20)
	copy(b, "hot-before")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	stop := serveHot(t, r, "hot", file)
	hot := controlapi.HotplugDisk{Name: "hot", Slot: 2, Socket: controlapi.HotplugSocket("hot")}
	putHotplug(t, c, "raw@0 hot@2", raw, hot)
	waitConsole(t, r, time.Minute, func(out string) bool {
		return strings.Contains(out, "VIRTPOD-GUEST-DISK-ADDED serial=hot sectors=32768 ro=0 head=hot-before\n") &&
			strings.Contains(out, "VIRTPOD-GUEST-DISK-WROTE serial=hot word="+hotWord+"\n")
	})
	checkListed(t, r, "disk-hot", true)

	putHotplug(t, c, "raw@0", raw)
	waitConsole(t, r, time.Minute, func(out string) bool { return strings.Count(out, "VIRTPOD-GUEST-DISK-REMOVED dev=vd") == 1 })
	checkListed(t, r, "disk-hot", false)
	stop()
	if !startsWith(t, file, hotWord) {
		t.Error("what the guest wrote to the hotplugged disk is not in its file")
	}

	putHotplug(t, c, "")
	waitConsole(t, r, time.Minute, func(out string) bool { return strings.Count(out, "VIRTPOD-GUEST-DISK-REMOVED dev=vd") == 2 })
	checkListed(t, r, "disk-raw", false)
	putHotplug(t, c, "raw@1", controlapi.HotplugDisk{Name: "raw", Slot: 1})
	waitConsole(t, r, time.Minute, func(out string) bool {
		return strings.Contains(out, "VIRTPOD-GUEST-DISK-ADDED serial=raw sectors=32768 ro=0 head=from-guest\n")
	})
	checkListed(t, r, "disk-raw", true)
	checkHotplugRefusals(t, c)
	for _, l := range strings.Split(r.stdout.String(), "\n") {
		if strings.Contains(l, "VIRTPOD-GUEST-DISK-ADDED") || strings.Contains(l, "VIRTPOD-GUEST-DISK-REMOVED") {
			t.Logf("guest: %s", strings.TrimSpace(l))
		}
	}
}

// checkHotplugRefusals: bad slots and sockets are refused (400) naming the field; a disk the pod
// was not started with, without a socket, is not attached, and the answer says why.
func checkHotplugRefusals(t *testing.T, c *podcontrol.Client) {
	t.Helper()
	raw := controlapi.HotplugDisk{Name: "raw", Slot: 1}
	for _, bad := range []struct {
		disk controlapi.HotplugDisk
		want string
	}{
		{controlapi.HotplugDisk{Name: "ghost", Slot: 4}, "disks[1].slot 4: the guest has slots 0 to 3"},
		{controlapi.HotplugDisk{Name: "ghost", Slot: 1}, "disks[1].slot 1: taken by another disk"},
		{controlapi.HotplugDisk{Name: "ghost", Slot: 3, Socket: "../ghost.sock"}, `disks[1].socket "../ghost.sock": want "hotplug-ghost.sock"`},
	} {
		_, err := c.Hotplug(context.Background(), controlapi.HotplugRequest{Disks: []controlapi.HotplugDisk{raw, bad.disk}})
		var ref *podcontrol.RunnerRefusal
		if !errors.As(err, &ref) || ref.Code != http.StatusBadRequest || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("PUT %+v: %v, want 400 with %q", bad.disk, err, bad.want)
		}
	}
	st, err := c.Hotplug(context.Background(), controlapi.HotplugRequest{Disks: []controlapi.HotplugDisk{raw, {Name: "ghost", Slot: 3}}})
	if err != nil || !slotsAre(st, "raw@1") || !strings.Contains(st.Error, "disk ghost: no socket given, and the runner pod was not started with the disk") {
		t.Errorf("a disk the pod does not hold, without a socket: %+v, %v", st, err)
	}
}

// serveHot serves file with qemu-nbd as export name on the disk's socket in r's control
// directory, as an attachment pod would; stop ends it (flushing the file).
func serveHot(t testing.TB, r *runnerProc, name, file string) (stop func()) {
	t.Helper()
	sock := filepath.Join(filepath.Dir(r.control), controlapi.HotplugSocket(name))
	_ = os.Remove(sock)
	cmd := exec.Command("qemu-nbd", "--socket="+sock, "--format=raw", "--export-name="+name, "--shared=1", "--persistent", file)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(stop)
	for end := time.Now().Add(10 * time.Second); !isSocketFile(sock); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("qemu-nbd did not listen on %s", sock)
		}
	}
	return stop
}

// putHotplug asks for disks and wants the slots as want says (name@slot, by slot), no error.
func putHotplug(t testing.TB, c *podcontrol.Client, want string, disks ...controlapi.HotplugDisk) controlapi.HotplugStatus {
	t.Helper()
	st, err := c.Hotplug(context.Background(), controlapi.HotplugRequest{Disks: disks})
	if err != nil || st.Error != "" || !slotsAre(st, want) {
		t.Fatalf("PUT %s %+v: %+v, %v; want %q", controlapi.HotplugPath, disks, st, err, want)
	}
	return st
}

func slotsAre(st controlapi.HotplugStatus, want string) bool {
	var got []string
	for _, d := range st.Disks {
		if d.State != controlapi.DiskStateAttached {
			return false
		}
		got = append(got, d.Name+"@"+string(rune('0'+d.Slot)))
	}
	return strings.Join(got, " ") == want
}

func getHotplug(t testing.TB, r *runnerProc) controlapi.HotplugStatus {
	t.Helper()
	var st controlapi.HotplugStatus
	getJSON(t, r, controlapi.HotplugPath, &st)
	return st
}

func getJSON(t testing.TB, r *runnerProc, path string, out any) {
	t.Helper()
	resp, err := controlClient(r.control).c.Get("http://runner" + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
}

// checkListed: GET /v1/drives and /v1/stats list drive, 16 MiB and writable, or neither does.
func checkListed(t testing.TB, r *runnerProc, drive string, listed bool) {
	t.Helper()
	var drives []controlapi.Drive
	getJSON(t, r, controlapi.DrivesPath, &drives)
	var stats controlapi.Stats
	getJSON(t, r, controlapi.StatsPath, &stats)
	var inDrives, inStats bool
	for _, d := range drives {
		if d.Drive == drive {
			inDrives = d.SizeBytes == 16<<20 && !d.ReadOnly
		}
	}
	for _, d := range stats.Disks {
		inStats = inStats || d.Drive == drive
	}
	if inDrives != listed || inStats != listed {
		t.Errorf("%s listed by GET %s: %v, by GET %s: %v; want %v\n%+v\n%+v", drive, controlapi.DrivesPath, inDrives, controlapi.StatsPath, inStats, listed, drives, stats.Disks)
	}
}
