package main

import (
	"bytes"
	"strings"
	"testing"
)

// Two runs as go test -json writes them: a test with a subtest, a flaky test with its message,
// a skipped one, and a package whose TestMain failed without a test.
const run1 = `{"Action":"run","Package":"x/e2e","Test":"TestA"}
{"Action":"run","Package":"x/e2e","Test":"TestA/sub"}
{"Action":"output","Package":"x/e2e","Test":"TestA/sub","Output":"    a_test.go:10: sub says hi\n"}
{"Action":"pass","Package":"x/e2e","Test":"TestA/sub"}
{"Action":"pass","Package":"x/e2e","Test":"TestA"}
{"Action":"output","Package":"x/e2e","Test":"TestFlaky","Output":"    flaky_test.go:42: nc: can't connect to remote host: Connection refused\n"}
{"Action":"output","Package":"x/e2e","Test":"TestFlaky","Output":"--- FAIL: TestFlaky (1.00s)\n"}
{"Action":"fail","Package":"x/e2e","Test":"TestFlaky"}
{"Action":"skip","Package":"x/e2e","Test":"TestSkipped"}
{"Action":"fail","Package":"x/e2e"}
not json: a build line
{"Action":"output","Package":"x/faults","Output":"FAIL: kube-apiserver missing\n"}
{"Action":"fail","Package":"x/faults"}
`

const run2 = `{"Action":"pass","Package":"x/e2e","Test":"TestA"}
{"Action":"pass","Package":"x/e2e","Test":"TestFlaky"}
{"Action":"skip","Package":"x/e2e","Test":"TestSkipped"}
{"Action":"pass","Package":"x/e2e"}
{"Action":"pass","Package":"x/faults","Test":"TestLeader"}
{"Action":"pass","Package":"x/faults"}
`

func TestCounts(t *testing.T) {
	ty := New()
	for name, run := range map[string]string{"run1": run1, "run2": run2} {
		if err := ty.AddRun(name, strings.NewReader(run)); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string][3]int{}
	for _, c := range ty.Counts() {
		got[c.Package+"."+c.Test] = [3]int{c.Pass, c.Fail, c.Skip}
	}
	want := map[string][3]int{
		"x/e2e.TestA": {2, 0, 0}, "x/e2e.TestFlaky": {1, 1, 0}, "x/e2e.TestSkipped": {0, 0, 2},
		"x/faults.(package)": {0, 1, 0}, "x/faults.TestLeader": {1, 0, 0},
	}
	if len(got) != len(want) {
		t.Errorf("counts %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: pass/fail/skip %v, want %v", k, got[k], w)
		}
	}
	if ty.Failures() != 2 {
		t.Errorf("failures %d, want 2", ty.Failures())
	}
	var out bytes.Buffer
	ty.Write(&out)
	for _, line := range []string{
		"  1 pass   1 fail   0 skip  x/e2e.TestFlaky\n",
		"FAIL x/e2e.TestFlaky in run1: flaky_test.go:42: nc: can't connect to remote host: Connection refused\n",
		"FAIL x/faults.(package) in run1: FAIL: kube-apiserver missing\n",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("report lacks %q:\n%s", line, out.String())
		}
	}
	if first := strings.SplitN(out.String(), "\n", 2)[0]; !strings.Contains(first, "fail") || strings.Contains(first, "  0 fail") {
		t.Errorf("failing tests come first; the first line is %q", first)
	}
}
