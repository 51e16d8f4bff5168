package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run's files as test.sh writes them, with go test's real summary lines (a failed package,
// a package without tests, a cached one that -count=1 never prints).
func TestReport(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	steps := write("steps.tsv", "vet\t-\t198000\t0\nk8s-binaries\tcold\t905500\t0\ncapi\tcached\t800\t0\ngo-test\t-\t925000\t1\n")
	bg := write("background.tsv", "debian-guest\tcold\t112000\t0\n")
	tests := write("go-test.log", strings.Join([]string{
		"?   \tgithub.com/virtpod/virtpod/apis\t[no test files]",
		"ok  \tgithub.com/virtpod/virtpod/runner\t380.123s",
		"    x_test.go:12: booted",
		"    x_test.go:30: the poller failed 9 times",
		"    x_test.go:80: events:",
		"        2m27s Normal Scheduled pod/poller",
		"--- FAIL: TestX (1.00s)",
		"        y_test.go:5: want 2",
		"    --- FAIL: TestY/sub (0.10s)",
		"--- FAIL: TestY (0.20s)",
		"--- FAIL: TestZ (0.30s)",
		"FAIL\tgithub.com/virtpod/virtpod/tests/e2e\t659.0s",
		"ok  \tgithub.com/virtpod/virtpod/pkg/qemu\t0.5s",
	}, "\n"))
	write("boots-runner.tsv", "runner\tTestLiveMigration\tguests\t1\nrunner\tTestLiveMigration\tincoming\t3\nrunner\tTestDisks\tguests\t2\n")
	write("boots-e2e.tsv", "tests/e2e\tTestVM\trunner pods\t1\n")

	in, err := load(steps, bg, tests, dir)
	if err != nil {
		t.Fatal(err)
	}
	in.totalSeconds = 3312
	if in.tests, err = parseTestTimes("github.com/virtpod/virtpod/runner\tTestLiveMigration\t70.50\tpass\n" +
		"github.com/virtpod/virtpod/runner\tTestLiveMigration/move\t8.00\tpass\n" +
		"github.com/virtpod/virtpod/tests/e2e\tTestX\t1.00\tfail\n"); err != nil {
		t.Fatal(err)
	}
	got := render(in)
	want := `== CI timing: 55m12s in all (budget: cold <= 60m, warm <= 20m; CI's limit 90m)
steps: vet 3m18s, k8s-binaries 15m05s (cold), capi 800ms (cached), go-test 15m25s FAILED(1)
beside the first builds: debian-guest 1m52s (cold)
test packages: 3 (1 failed), 17m19s of package time; slowest: tests/e2e 10m59s FAILED, runner 6m20s, pkg/qemu 500ms
slowest tests: runner.TestLiveMigration 1m10s, tests/e2e.TestX 1.0s FAILED
boots: runner 3 guests (more than one: TestDisks 2)
boots: runner 3 incoming (more than one: TestLiveMigration 3)
boots: tests/e2e 1 runner pods
FAILED TestX
  x_test.go:12: booted
  x_test.go:30: the poller failed 9 times
  x_test.go:80: events:
FAILED TestY/sub
  y_test.go:5: want 2
FAILED TestZ (no line of its own: see its output above)
`
	if got != want {
		t.Errorf("report:\n%s\nwant:\n%s", got, want)
	}
}

func TestReportRefusesMalformedSteps(t *testing.T) {
	if _, err := parseSteps("vet\t-\tabc\t0\n"); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("want an error naming line 1, got %v", err)
	}
	if _, err := parseBoots("runner\tTestX\tguests\n"); err == nil {
		t.Fatal("a boots line without a count was accepted")
	}
	if _, err := parseTestTimes("runner\tTestX\tslow\tpass\n"); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("a test time that is not a number: %v", err)
	}
}
