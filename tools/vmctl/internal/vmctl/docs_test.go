package vmctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestEveryVerbDocumented: docs/vmctl.md has a `## vmctl ...` section naming each verb the binary
// has (a section may name several: `## vmctl stop | start | restart VM`), and names none it lacks.
func TestEveryVerbDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "vmctl.md"))
	if err != nil {
		t.Fatal(err)
	}
	var headings [][]string // each heading's words, "|" apart too
	for line := range strings.Lines(string(doc)) {
		if rest, ok := strings.CutPrefix(line, "## vmctl "); ok {
			headings = append(headings, strings.Fields(strings.ReplaceAll(rest, "|", " ")))
		}
	}
	documented := func(path []string) bool {
	next:
		for _, words := range headings {
			for _, w := range path {
				if !contains(words, w) {
					continue next
				}
			}
			return true
		}
		return false
	}
	verbs := map[string]bool{}
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			p := append(append([]string(nil), path...), sub.Name())
			verbs[sub.Name()] = true
			if sub.HasSubCommands() {
				walk(sub, p)
				continue
			}
			if !documented(p) {
				t.Errorf("docs/vmctl.md has no `## vmctl %s` section", strings.Join(p, " "))
			}
		}
	}
	walk((&app{}).rootCmd("vmctl"), nil)
	for _, words := range headings {
		if !verbs[words[0]] {
			t.Errorf("docs/vmctl.md documents `vmctl %s`, which the binary does not have", strings.Join(words, " "))
		}
	}
}

func contains(words []string, w string) bool {
	for _, x := range words {
		if x == w {
			return true
		}
	}
	return false
}
