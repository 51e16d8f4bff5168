package guestagent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBootstrapFromTheRealAgent: the host's real qemu-ga reads the files a bootstrap leaves, as
// it does in a guest: nothing while neither is there; cloud-init's end with its errors,
// cleaned and bounded; the Cluster API sentinel.
func TestBootstrapFromTheRealAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, realAgent(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dir := t.TempDir()
	files := BootstrapFiles{Sentinel: filepath.Join(dir, "bootstrap-success.complete"), Result: filepath.Join(dir, "result.json")}

	if b, err := c.Bootstrap(ctx, files); err != nil || b != nil {
		t.Fatalf("neither file: %+v, %v; want nil, nil", b, err)
	}

	// cloud-init ended with errors, one with a terminal escape, one too long, more than 8.
	errs := []string{`"('scripts_user', RuntimeError('Runparts: 1 failures (runcmd) in 1 attempted commands'))"`, `"\u001b[31mred\u001b[0m"`,
		`"` + strings.Repeat("x", 1000) + `"`, `{"not":"a string"}`, `"5"`, `"6"`, `"7"`, `"8"`, `"9"`}
	result := `{"v1": {"datasource": "DataSourceNoCloud", "errors": [` + strings.Join(errs, ",") + `]}}`
	if err := os.WriteFile(files.Result, []byte(result), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := c.Bootstrap(ctx, files)
	if err != nil || b == nil || b.Sentinel || !b.CloudInitDone {
		t.Fatalf("cloud-init's result alone: %+v, %v", b, err)
	}
	if len(b.CloudInitErrors) != 8 || !strings.Contains(b.CloudInitErrors[0], "Runparts: 1 failures (runcmd)") ||
		b.CloudInitErrors[1] != "[31mred[0m" || len(b.CloudInitErrors[2]) != 256 || b.CloudInitErrors[3] != `{"not":"a string"}` {
		t.Errorf("errors %q", b.CloudInitErrors)
	}

	// The join succeeded: the sentinel, and a clean result.
	if err := os.WriteFile(files.Sentinel, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files.Result, []byte(`{"v1": {"errors": []}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err = c.Bootstrap(ctx, files); err != nil || b == nil || !b.Sentinel || !b.CloudInitDone || len(b.CloudInitErrors) != 0 {
		t.Fatalf("sentinel and a clean result: %+v, %v", b, err)
	}
	// The agent's handles are closed: many reads later it still opens files.
	for i := 0; i < 20; i++ {
		if _, err := c.Bootstrap(ctx, files); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	if f := (Facts{Bootstrap: b}).Cleaned(); f.Bootstrap == nil || !f.Bootstrap.Sentinel || !slices.Equal(f.Bootstrap.CloudInitErrors, b.CloudInitErrors) {
		t.Errorf("cleaned %+v", f.Bootstrap)
	}
}
