package vmctl

import (
	"bytes"
	"strings"
	"testing"
)

// TestPluginUsage: installed as kubectl-virtpod, help must show the command users type.
func TestPluginUsage(t *testing.T) {
	for argv0, want := range map[string]string{
		"/usr/local/bin/kubectl-virtpod": "kubectl virtpod provider disable NAME --reason TEXT",
		"./vmctl":                        "vmctl provider disable NAME --reason TEXT",
	} {
		var out, errOut bytes.Buffer
		if code := Run([]string{argv0, "provider", "disable", "--help"}, &out, &errOut); code != 0 {
			t.Fatalf("%s: exit %d, %s", argv0, code, errOut.String())
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("%s: usage lacks %q:\n%s", argv0, want, out.String())
		}
	}
}

func TestBadOutputAndMissingReason(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Run([]string{"vmctl", "status", "-o", "xml"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "table, json or yaml") {
		t.Errorf("-o xml: exit %d, %q", code, errOut.String())
	}
	errOut.Reset()
	// Refused before any connection is attempted, so no cluster is needed.
	if code := Run([]string{"vmctl", "provider", "disable", "qemu", "--reason", "  "}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "--reason is required") {
		t.Errorf("blank reason: exit %d, %q", code, errOut.String())
	}
}
