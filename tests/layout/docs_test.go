package layout

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/virtpod/virtpod/tests/kubeapi"
)

// TestDocsIndexListsEveryDoc: docs/README.md, the docs index, links every docs/*.md file, and
// every file it links exists.
func TestDocsIndexListsEveryDoc(t *testing.T) {
	root := kubeapi.Root()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md under %s: %v", root, err)
	}
	index := filepath.Join(root, "docs", "README.md")
	linked := map[string]bool{}
	for _, l := range mdLinks(t, index) {
		if l.local() {
			linked[filepath.Clean(filepath.Join(filepath.Dir(index), l.path()))] = true
		}
	}
	for _, d := range docs {
		if d == index || linked[d] {
			continue
		}
		name := filepath.Base(d)
		t.Errorf("docs/%s is not in the docs index: add a line `- [%s](%s) — what it holds` to docs/README.md, under the readers it is for (users, operators or developers)", name, name, name)
	}
	// A file the index links that does not exist: TestDocLinksResolve reports it, with its line.
}

// TestDocLinksResolve: every relative link in README.md and docs/*.md names a file that exists,
// and a #fragment into a Markdown file names one of its headings (GitHub's anchors).
func TestDocLinksResolve(t *testing.T) {
	root := kubeapi.Root()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	anchors := map[string]map[string]bool{}
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		for _, l := range mdLinks(t, f) {
			if !l.local() {
				continue
			}
			target := f
			if p := l.path(); p != "" {
				target = filepath.Clean(filepath.Join(filepath.Dir(f), p))
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s:%d links %s, which does not exist: correct the path or remove the link", rel, l.line, l.target)
				continue
			}
			frag := l.fragment()
			if frag == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			if anchors[target] == nil {
				anchors[target] = headingAnchors(t, target)
			}
			if !anchors[target][frag] {
				trel, _ := filepath.Rel(root, target)
				t.Errorf("%s:%d links %s, but %s has no heading whose anchor is #%s: link a heading it has, or keep the heading", rel, l.line, l.target, trel, frag)
			}
		}
	}
}

// TestLayoutDocListsEveryPackage: docs/layout.md's Packages table has one row for every package
// directory of the module (what `go list ./...` prints), and no row for a package that is gone.
func TestLayoutDocListsEveryPackage(t *testing.T) {
	root := kubeapi.Root()
	cmd := exec.Command("go", "list", "-e", "-f", "{{.ImportPath}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list ./...: %v\n%s", err, stderr)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		if p == strings.TrimSuffix(module, "/") {
			pkgs = append(pkgs, ".")
			continue
		}
		if !strings.HasPrefix(p, module) {
			continue // not a package of this module (a nested module's)
		}
		pkgs = append(pkgs, strings.TrimPrefix(p, module))
	}
	if len(pkgs) == 0 {
		t.Fatalf("go list ./... printed no package of %s", module)
	}

	rows, heading := layoutRows(t, filepath.Join(root, "docs", "layout.md"))
	isPkg := map[string]bool{}
	for _, p := range pkgs {
		isPkg[p] = true
	}
	listed := map[string]int{}
	var paths []string // the listed packages that exist, sorted: where a missing one goes
	for _, r := range rows {
		if n, dup := listed[r.path]; dup {
			t.Errorf("docs/layout.md:%d lists `%s` again (first at line %d): delete one of the two lines", r.line, r.path, n)
			continue
		}
		listed[r.path] = r.line
		if isPkg[r.path] {
			paths = append(paths, r.path)
		}
	}
	sort.Strings(paths)

	for _, p := range pkgs {
		if _, ok := listed[p]; ok {
			continue
		}
		where := fmt.Sprintf("to the table under ## Packages (line %d)", heading)
		switch i := sort.SearchStrings(paths, p); {
		case i > 0:
			where = fmt.Sprintf("after the line of `%s` (line %d), to keep the table sorted", paths[i-1], listed[paths[i-1]])
		case len(paths) > 0:
			where = fmt.Sprintf("before the line of `%s` (line %d), to keep the table sorted", paths[0], listed[paths[0]])
		}
		t.Errorf("package %s is not in docs/layout.md: add this line %s, saying in one line what it does:\n\t| `%s` | <what it does> |", p, where, p)
	}
	for _, r := range rows {
		if isPkg[r.path] {
			continue
		}
		why := "no such directory"
		if fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(r.path))); err == nil && fi.IsDir() {
			why = "the directory holds no Go package: go list ./... does not print it"
		}
		t.Errorf("docs/layout.md:%d lists `%s`, which is no package of the module (%s): delete that line, or give it the package's new path", r.line, r.path, why)
	}
}

type layoutRow struct {
	path string
	line int
}

var layoutRowRE = regexp.MustCompile("^\\|\\s*`([^`]+)`\\s*\\|")

// layoutRows reads the rows of the table under "## Packages" in docs/layout.md, and the line of
// that heading.
func layoutRows(t *testing.T, file string) (rows []layoutRow, heading int) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("docs/layout.md: %v", err)
	}
	defer f.Close()
	in := false
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; s.Scan(); n++ {
		line := s.Text()
		if strings.HasPrefix(line, "## ") {
			in = strings.TrimSpace(line) == "## Packages"
			if in {
				heading = n
			}
			continue
		}
		if !in {
			continue
		}
		if m := layoutRowRE.FindStringSubmatch(line); m != nil {
			rows = append(rows, layoutRow{path: strings.TrimSuffix(strings.TrimSpace(m[1]), "/"), line: n})
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("docs/layout.md: %v", err)
	}
	if heading == 0 {
		t.Fatalf("docs/layout.md has no `## Packages` section: it holds the table of every package (| `path` | what it does |)")
	}
	return rows, heading
}

type mdLink struct {
	target string
	line   int
}

func (l mdLink) local() bool {
	return !schemeRE.MatchString(l.target)
}

func (l mdLink) path() string {
	p, _, _ := strings.Cut(l.target, "#")
	return p
}

func (l mdLink) fragment() string {
	_, f, _ := strings.Cut(l.target, "#")
	return f
}

var (
	linkRE     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpanRE = regexp.MustCompile("`[^`]*`")
	schemeRE   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`) // https:, mailto:
)

// mdLinks returns the inline links of a Markdown file, outside fenced code blocks and code spans.
func mdLinks(t *testing.T, file string) []mdLink {
	t.Helper()
	var links []mdLink
	eachLine(t, file, func(n int, line string) {
		for _, m := range linkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(line, "``"), -1) {
			links = append(links, mdLink{target: m[1], line: n})
		}
	})
	return links
}

// headingAnchors returns the anchors GitHub gives a Markdown file's headings: lower case, only
// letters, digits, '_', '-' and spaces kept, spaces made '-', a repeat suffixed -1, -2, ...
func headingAnchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	anchors := map[string]bool{}
	seen := map[string]int{}
	eachLine(t, file, func(_ int, line string) {
		text, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") || len(line)-len(strings.TrimLeft(line, "#")) > 6 {
			return
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(text)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n, dup := seen[a]; dup {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n+1)
		} else {
			seen[a] = 0
		}
		anchors[a] = true
	})
	return anchors
}

// eachLine calls fn with each line of a Markdown file outside fenced code blocks.
func eachLine(t *testing.T, file string, fn func(n int, line string)) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	fence := false
	for n := 1; s.Scan(); n++ {
		line := s.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if !fence {
			fn(n, line)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// TestREADMEIsShort: the front door stays a front door — at most 120 lines and 8 KiB; what does
// not fit goes to a doc the README links (docs/status.md, docs/testing.md, docs/layout.md).
func TestREADMEIsShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(kubeapi.Root(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(b), "\n"); len(b) > 8192 || lines > 120 {
		t.Errorf("README.md is %d bytes and %d lines; keep it within 8192 bytes and 120 lines: move the detail into a doc and link it", len(b), lines)
	}
}

// TestEveryKeyDocumented: every label, annotation and finalizer key the code names under
// vm.virtpod.io/, virtpod.io/ or provider.virtpod.io/ is in docs/annotations.md, so the pod's
// contract is read in one place.
func TestEveryKeyDocumented(t *testing.T) {
	root := kubeapi.Root()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "annotations.md"))
	if err != nil {
		t.Fatal(err)
	}
	key := regexp.MustCompile(`"((?:vm\.|provider\.)?virtpod\.io/[a-z0-9-]+)"`)
	seen := map[string]string{}
	for _, dir := range []string{"apis", "controllers", "pkg", "agent", "runner", "cmd"} {
		err := filepath.Walk(filepath.Join(root, dir), func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range key.FindAllSubmatch(b, -1) {
				seen[string(m[1])] = strings.TrimPrefix(p, root+"/")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) < 10 {
		t.Fatalf("found only %d keys in the code: the scan is broken", len(seen))
	}
	for k, file := range seen {
		if !strings.Contains(string(doc), "`"+k) {
			t.Errorf("%s (named in %s) is not in docs/annotations.md: add a row saying on which object it is, who writes it and who reads it", k, file)
		}
	}
}
