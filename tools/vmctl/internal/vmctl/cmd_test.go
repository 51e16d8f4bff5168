package vmctl

import (
	"bytes"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
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

// TestHelpOnEveryVerb: every verb answers --help with its usage line and exit 0.
func TestHelpOnEveryVerb(t *testing.T) {
	a := &app{}
	var walk func(c *cobra.Command)
	var verbs []string
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			verbs = append(verbs, strings.TrimPrefix(sub.CommandPath(), "vmctl "))
			walk(sub)
		}
	}
	root := a.rootCmd("vmctl")
	root.InitDefaultCompletionCmd() // cobra adds it when the command runs
	walk(root)
	for _, want := range []string{"console", "logs", "port-forward", "ssh", "status", "provider enable", "completion bash"} {
		if !slices.Contains(verbs, want) {
			t.Errorf("no verb %q among %q", want, verbs)
		}
	}
	for _, v := range verbs {
		var out, errOut bytes.Buffer
		args := append([]string{"vmctl"}, strings.Fields(v)...)
		if code := Run(append(args, "--help"), &out, &errOut); code != 0 || !strings.Contains(out.String(), "Usage:") {
			t.Errorf("vmctl %s --help: exit %d, stdout %q, stderr %q", v, code, out.String(), errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := Run([]string{"vmctl", "--help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "-n, --namespace") || !strings.Contains(out.String(), "Exit codes") {
		t.Errorf("vmctl --help: exit %d:\n%s", code, out.String())
	}
}

// TestUsageErrorsExit2: a wrong command line is exit 2 with the mistake and where to look, before
// any connection is attempted.
func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"consle", "web"},
		{"console"},
		{"console", "a", "b"},
		{"logs", "web", "--bogus"},
		{"port-forward", "web"},
		{"port-forward", "web", "80:http"},
		{"port-forward", "web", "x:80"},
		{"ssh", "web", "uname"},
	} {
		var out, errOut bytes.Buffer
		code := Run(append([]string{"vmctl", "--kubeconfig", "/nonexistent"}, args...), &out, &errOut)
		if code != 2 || !strings.HasPrefix(errOut.String(), "error: ") || !strings.Contains(errOut.String(), "--help") {
			t.Errorf("vmctl %s: exit %d, stderr %q; want exit 2", strings.Join(args, " "), code, errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	Run([]string{"vmctl", "consle"}, &out, &errOut)
	if !strings.Contains(errOut.String(), `did you mean "console"?`) {
		t.Errorf("no suggestion: %q", errOut.String())
	}
}

// TestCompletion: the shells' completion scripts, for vmctl and for the kubectl plugin.
func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_vmctl", "zsh": "#compdef vmctl", "fish": "complete -c vmctl"} {
		var out, errOut bytes.Buffer
		if code := Run([]string{"vmctl", "completion", shell}, &out, &errOut); code != 0 || !strings.Contains(out.String(), want) {
			t.Errorf("completion %s: exit %d, %q missing (stderr %q)", shell, code, want, errOut.String())
		}
	}
}

func TestParseForward(t *testing.T) {
	for in, want := range map[string]string{"80": "80:80", "8080:80": "8080:80", ":22": "0:22", "0:22": "0:22"} {
		l, g, err := parseForward(in)
		if err != nil || l+":"+strconv.Itoa(int(g)) != want {
			t.Errorf("parseForward(%q) = %s:%d, %v; want %s", in, l, g, err, want)
		}
	}
	for _, bad := range []string{"", ":", "0", "80:", "a:80", "80:a", "70000", "1:2:3"} {
		if _, _, err := parseForward(bad); err == nil {
			t.Errorf("parseForward(%q) accepted", bad)
		}
	}
}

// TestEscapeReader: input passes up to and including Ctrl-], then ends.
func TestEscapeReader(t *testing.T) {
	e := &escapeReader{r: strings.NewReader("ls\r\x1dnever"), detached: make(chan struct{})}
	b, err := io.ReadAll(e)
	if err != nil || string(b) != "ls\r\x1d" {
		t.Fatalf("read %q, %v", b, err)
	}
	select {
	case <-e.detached:
	default:
		t.Fatal("not detached after the escape key")
	}
}
