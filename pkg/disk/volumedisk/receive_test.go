package volumedisk_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/disk/volumedisk"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
)

// TestReceiveOnlyIntoAnEmptyClaim: a migration target makes an empty sparse disk of the size
// asked, marked as being received; a claim that holds a disk, a fill or its remains is refused
// and left as it was.
func TestReceiveOnlyIntoAnEmptyClaim(t *testing.T) {
	dir := t.TempDir()
	disk, err := volumedisk.Receive(dir, 24*mib, "vm-a-target")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(disk); err != nil || fi.Size() != 24*mib || allocated(t, disk) != 0 {
		t.Fatalf("received disk: %v, %v; want 24 MiB, sparse", fi, err)
	}
	if err := volumedisk.CheckComplete(dir); err == nil || !strings.Contains(err.Error(), "never completed here") || !strings.Contains(err.Error(), "vm-a-target") {
		t.Fatalf("CheckComplete while receiving: %v", err)
	}

	for _, there := range []string{runnerconfig.DiskFileName, runnerconfig.PopulatedMarker, runnerconfig.DiskFileName + ".partial", runnerconfig.ReceivingMarker} {
		t.Run(there, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, there)
			if err := os.WriteFile(p, []byte("the guest's"), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := volumedisk.Receive(dir, mib, "t"); err == nil || !strings.Contains(err.Error(), "already holds "+there) {
				t.Fatalf("Receive into a claim with %s: %v", there, err)
			}
			if b, _ := os.ReadFile(p); string(b) != "the guest's" {
				t.Errorf("%s changed to %q", there, b)
			}
		})
	}
}

// TestReceivedRootIsNeverFilledAgain: once the guest arrived, the received root disk carries the
// fill's marker (migrated), so Fill keeps it as the guest's disk rather than copying the image
// over it; before that, Fill refuses it as partial.
func TestReceivedRootIsNeverFilledAgain(t *testing.T) {
	image, _ := rawImage(t, t.TempDir())
	size, err := volumedisk.FilledSize(image, 32*mib)
	if err != nil || size != 32*mib {
		t.Fatalf("FilledSize: %d, %v; want 32 MiB", size, err)
	}
	if s, _ := volumedisk.FilledSize(image, mib); s != 24*mib {
		t.Fatalf("FilledSize below the image's size: %d; want the image's 24 MiB", s)
	}
	dir := t.TempDir()
	disk, err := volumedisk.Receive(dir, size, "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := volumedisk.Fill(context.Background(), image, dir, volumedisk.FillOptions{SizeBytes: 32 * mib}); err == nil || !strings.Contains(err.Error(), "partial") {
		t.Fatalf("Fill of a disk still being received: %v; want it refused", err)
	}
	// What the mirror wrote.
	if err := os.WriteFile(disk, append([]byte("mirrored"), make([]byte, size-8)...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := volumedisk.Received(dir, &volumedisk.Marker{Image: image, SizeBytes: size, Migrated: true}); err != nil {
		t.Fatal(err)
	}
	if err := volumedisk.CheckComplete(dir); err != nil {
		t.Fatalf("CheckComplete after Received: %v", err)
	}
	res, err := volumedisk.Fill(context.Background(), image, dir, volumedisk.FillOptions{SizeBytes: 32 * mib})
	if err != nil || res.Filled || res.Marker == nil || !res.Marker.Migrated {
		t.Fatalf("Fill after the guest arrived: %+v, %v; want the disk kept, its marker migrated", res, err)
	}
	if b, _ := os.ReadFile(disk); !strings.HasPrefix(string(b), "mirrored") {
		t.Fatalf("the received disk was overwritten: %q", b[:16])
	}
}
