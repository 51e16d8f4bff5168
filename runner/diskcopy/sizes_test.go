package diskcopy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// sized takes each size-less target's size from the agent's file, and refuses a drive it does
// not name, a size that is not whole sectors, and a base of another size than the drive.
func TestSized(t *testing.T) {
	base := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(base, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, sizes string
		targets     []TargetSpec
		want        string // "" for success
	}{
		{"from the file", `{"root": 8192}`, []TargetSpec{{Drive: "root", File: "/x/disk.img"}, {Drive: "disk-a", File: "/y/disk.img", Size: 512}}, ""},
		{"drive not named", `{"root": 8192}`, []TargetSpec{{Drive: "disk-b", File: "/x/disk.img"}}, "gives no size for drive disk-b"},
		{"not sectors", `{"root": 1000}`, []TargetSpec{{Drive: "root", File: "/x/disk.img"}}, "not a whole number of 512-byte sectors"},
		{"base of another size", `{"root": 8192}`, []TargetSpec{{Drive: "root", File: "/x/disk.img", Base: base}}, "is 4096 bytes and the drive 8192"},
		{"not JSON", `{"root":`, []TargetSpec{{Drive: "root", File: "/x/disk.img"}}, "unexpected end of JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, SizesName), []byte(c.sizes), 0o400); err != nil {
				t.Fatal(err)
			}
			got, err := sized(context.Background(), dir, c.targets, time.Second, zap.NewNop())
			switch {
			case c.want == "" && err != nil:
				t.Fatal(err)
			case c.want == "" && (got[0].Size != 8192 || got[1].Size != 512):
				t.Errorf("sizes %+v, want 8192 from the file and 512 as given", got)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
	// No file within the wait: the error says who should have written it.
	if _, err := sized(context.Background(), t.TempDir(), []TargetSpec{{Drive: "root", File: "/x/disk.img"}}, 100*time.Millisecond, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "node agent wrote no") {
		t.Errorf("no sizes file: %v", err)
	}
}
