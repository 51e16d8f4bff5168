package boot

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/virtpod/virtpod/pkg/disk/volumedisk"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/runner/status"
)

// TestPartialClaimsRefused: a claim a migration target was filling when it ended is refused by
// every later start, root or data disk, naming the marker and the fix; the target itself makes
// its copied claims (and only those) as disks to receive.
func TestPartialClaimsRefused(t *testing.T) {
	rootDir, dataDir := t.TempDir(), t.TempDir()
	target := runnerconfig.Config{Name: "vm-m1", Incoming: true, DiskSizeMiB: 16,
		RootVolume: &runnerconfig.Disk{Kind: runnerconfig.DiskFile, Path: rootDir, Migrate: runnerconfig.MigrateCopy, SizeMiB: 16},
		Disks:      []runnerconfig.Disk{{Name: "data", Kind: runnerconfig.DiskFile, Path: dataDir, SizeMiB: 8, Migrate: runnerconfig.MigrateCopy}}}
	if _, err := rootVolume(context.Background(), target, "", status.New("qemu", "tcg"), zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	if _, err := prepareDisk(target, target.Disks[0], zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{rootDir, dataDir} {
		if _, err := os.Stat(filepath.Join(dir, runnerconfig.ReceivingMarker)); err != nil {
			t.Fatalf("the target's claim %s is not marked as being received: %v", dir, err)
		}
	}

	// The target ended before its guest arrived; a VM started again on these claims:
	started := target
	started.Incoming = false
	if _, err := rootVolume(context.Background(), started, "", status.New("qemu", "tcg"), zap.NewNop()); err == nil || !strings.Contains(err.Error(), "--root-volume: this claim's disk.img was being copied by a live migration") {
		t.Errorf("root claim left partial: %v", err)
	}
	if _, err := prepareDisk(started, started.Disks[0], zap.NewNop()); err == nil || !strings.Contains(err.Error(), "never completed here") {
		t.Errorf("data claim left partial: %v", err)
	}

	// Once the guest arrived, they are the guest's.
	if err := MarkReceived(target); err != nil {
		t.Fatal(err)
	}
	if _, err := prepareDisk(started, started.Disks[0], zap.NewNop()); err != nil {
		t.Errorf("data claim after the guest arrived: %v", err)
	}
	if m, err := volumedisk.ReadMarker(rootDir); err != nil || !m.Migrated || m.SizeBytes != 16<<20 {
		t.Errorf("root claim's marker after the guest arrived: %+v, %v", m, err)
	}

	// A shared claim, a read-only one, or a runner that is no target: nothing received.
	for _, d := range []runnerconfig.Disk{
		{Kind: runnerconfig.DiskFile, Migrate: runnerconfig.MigrateShared},
		{Kind: runnerconfig.DiskFile, Migrate: runnerconfig.MigrateShared, ReadOnly: true},
		{Kind: runnerconfig.DiskBlock, Migrate: runnerconfig.MigrateCopy},
	} {
		if receives(target, d) {
			t.Errorf("receives %+v", d)
		}
	}
	if receives(started, target.Disks[0]) {
		t.Error("a runner that is no target receives")
	}
}
