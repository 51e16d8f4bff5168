package dropcaps_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/virtpod/virtpod/pkg/dropcaps"
	"github.com/virtpod/virtpod/tests/prereq"
)

// TestMain lets the test binary be the process that calls Exec.
func TestMain(m *testing.M) {
	if os.Getenv("DROPCAPS_TEST_EXEC") == "1" {
		if held, err := dropcaps.Held(); err != nil || !held {
			os.Stderr.WriteString("the child held no capability before Exec: the test proves nothing\n")
			os.Exit(2)
		}
		err := dropcaps.Exec([]string{"/bin/sh", "-c", `grep -E "^(Cap(Inh|Prm|Eff|Amb)|NoNewPrivs):" /proc/self/status; cat <&3`})
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// TestExecLeavesNoCapability: root's command, replaced through Exec, holds no capability in any
// set, cannot gain one (no_new_privs), and still has the descriptors it was given.
func TestExecLeavesNoCapability(t *testing.T) {
	prereq.Need(t, os.Geteuid() == 0, "needs root: capabilities to give up")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("descriptor 3 kept\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	defer r.Close()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "DROPCAPS_TEST_EXEC=1")
	cmd.ExtraFiles = []*os.File{r}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, want := range []string{"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "descriptor 3 kept"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("after Exec the command's status lacks %q:\n%s", want, out)
		}
	}
	if held, err := dropcaps.Held(); err != nil || !held {
		t.Errorf("Held() = %v, %v in the root test process: want true", held, err)
	}
}
