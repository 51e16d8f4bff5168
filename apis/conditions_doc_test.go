// Package apis_test checks docs/api.md's table of conditions against the condition types and
// reasons the API packages define, so neither can change without the other.
package apis_test

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// constants are one API package's condition types and reasons: value → constant name.
type constants struct{ types, reasons map[string]string }

// kinds are the kinds whose conditions docs/api.md lists, and the package defining them.
var kinds = map[string]string{
	"VirtualMachine":          "vm/v1alpha1",
	"ProviderClass":           "vm/v1alpha1",
	"VirtualMachineMigration": "vm/v1alpha1",
	"VirtualMachineSnapshot":  "vm/v1alpha1",
	"VirtualMachineRestore":   "vm/v1alpha1",
	"VirtPodCluster":          "infrastructure/v1alpha1",
	"VirtPodMachine":          "infrastructure/v1alpha1",
}

func TestConditionsDocumented(t *testing.T) {
	defined := map[string]constants{}
	for _, pkg := range kinds {
		if _, ok := defined[pkg]; !ok {
			defined[pkg] = parseConstants(t, filepath.Join(pkg, "condition_consts.go"))
		}
	}
	documented := parseDocs(t, filepath.Join("..", "docs", "api.md"))
	for kind := range kinds {
		if _, ok := documented[kind]; !ok {
			t.Errorf("docs/api.md has no table of %s's conditions under ## Conditions", kind)
		}
	}
	for pkg, c := range defined {
		docTypes, docReasons := map[string]bool{}, map[string]bool{}
		for kind, d := range documented {
			if kinds[kind] != pkg {
				continue
			}
			for v := range d.types {
				docTypes[v] = true
			}
			for v := range d.reasons {
				docReasons[v] = true
			}
		}
		for v, name := range c.types {
			if !docTypes[v] {
				t.Errorf("%s.%s = %q is missing from docs/api.md's tables of conditions", pkg, name, v)
			}
		}
		for v, name := range c.reasons {
			if !docReasons[v] {
				t.Errorf("%s.%s = %q is missing from docs/api.md's tables of conditions", pkg, name, v)
			}
		}
		for v := range docTypes {
			if _, ok := c.types[v]; !ok {
				t.Errorf("docs/api.md names condition type %q, which %s does not define", v, pkg)
			}
		}
		for v := range docReasons {
			if _, ok := c.reasons[v]; !ok {
				t.Errorf("docs/api.md names reason %q, which %s does not define", v, pkg)
			}
		}
	}
}

// parseConstants reads the condition types and reasons of a condition_consts.go and checks that
// each is named after its value.
func parseConstants(t *testing.T, path string) constants {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := constants{types: map[string]string{}, reasons: map[string]string{}}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, id := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Errorf("%s: %s is not a string literal", path, id.Name)
					continue
				}
				v, _ := strconv.Unquote(lit.Value)
				switch name := id.Name; {
				case strings.HasPrefix(name, "Reason"):
					if name != "Reason"+v {
						t.Errorf("%s: %s = %q: a reason is named after its value, Reason%s", path, name, v, v)
					}
					c.reasons[v] = name
				case strings.HasPrefix(name, "Condition") || strings.HasSuffix(name, "Condition"):
					if name != "Condition"+v && name != v+"Condition" {
						t.Errorf("%s: %s = %q: a condition type is named after its value", path, name, v)
					}
					c.types[v] = name
				default:
					t.Errorf("%s: %s is neither a condition type (Condition…, …Condition) nor a reason (Reason…)", path, name)
				}
			}
		}
	}
	return c
}

// parseDocs reads the tables under docs/api.md's "## Conditions": for each "### Kind", the
// condition types and reasons its rows name (in backquotes; several to a cell are allowed).
func parseDocs(t *testing.T, path string) map[string]constants {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	quoted := regexp.MustCompile("`([^`]+)`")
	names := func(cell string) []string {
		var out []string
		for _, m := range quoted.FindAllStringSubmatch(cell, -1) {
			out = append(out, m[1])
		}
		return out
	}
	out := map[string]constants{}
	var in bool
	var kind string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case line == "## Conditions":
			in = true
			continue
		case strings.HasPrefix(line, "## "):
			in = false
		case in && strings.HasPrefix(line, "### "):
			kind = strings.TrimPrefix(line, "### ")
			if _, ok := kinds[kind]; !ok {
				t.Errorf("docs/api.md:%d: conditions of %q, which is not a kind with conditions", n, kind)
			}
			out[kind] = constants{types: map[string]string{}, reasons: map[string]string{}}
			continue
		}
		if !in || kind == "" || !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "| type ") || strings.HasPrefix(line, "| ---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 {
			t.Errorf("docs/api.md:%d: a row of %d cells, want type | reason | status | meaning", n, len(cells))
			continue
		}
		types, reasons := names(cells[0]), names(cells[1])
		if len(types) == 0 || len(reasons) == 0 {
			t.Errorf("docs/api.md:%d: a row without a type or a reason in backquotes", n)
		}
		for _, s := range strings.Split(cells[2], ",") {
			if s = strings.TrimSpace(s); !slices.Contains([]string{"True", "False", "Unknown"}, s) {
				t.Errorf("docs/api.md:%d: status %q, want True, False or Unknown", n, s)
			}
		}
		for _, v := range types {
			out[kind].types[v] = kind
		}
		for _, v := range reasons {
			out[kind].reasons[v] = kind
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
