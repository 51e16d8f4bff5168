package main

// The tally of top-level test outcomes across runs of `go test -json`.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// event is the part of a test2json event read here.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// Count is one test's outcomes over the runs.
type Count struct {
	Package, Test    string
	Pass, Fail, Skip int
	Causes           []string // per failing run: the run's name and the test's first messages
}

// packageLevel names what a package does outside its tests (a build error, a TestMain that
// exits): it counts as a test of its own when it fails without a test failing.
const packageLevel = "(package)"

// Tally is the counts of every top-level test seen.
type Tally struct {
	counts map[string]*Count
}

func New() *Tally { return &Tally{counts: map[string]*Count{}} }

// message is a t.Error/t.Fatal line (file_test.go:line: text) or a panic.
var message = regexp.MustCompile(`^\s*\S+_test\.go:\d+: |^panic: |^FAIL: `)

// AddRun reads one run's events.
func (t *Tally) AddRun(run string, r io.Reader) error {
	output := map[string][]string{} // per test: its messages in this run
	failed := map[string]bool{}     // packages in which a test failed in this run
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Package == "" {
			continue // go test's own lines around the JSON
		}
		name, _, sub := strings.Cut(e.Test, "/") // a subtest counts for its test
		if name == "" {
			name = packageLevel
		}
		key := e.Package + "\x00" + name
		switch {
		case e.Action == "output":
			if message.MatchString(e.Output) && len(output[key]) < 3 {
				output[key] = append(output[key], strings.TrimSpace(e.Output))
			}
		case sub:
			// a subtest's end: its test's end counts
		case e.Action == "pass" && name != packageLevel:
			t.count(e.Package, name).Pass++
		case e.Action == "skip" && name != packageLevel:
			t.count(e.Package, name).Skip++
		case e.Action == "fail":
			if name == packageLevel && failed[e.Package] {
				continue // the package failed because a test did: counted there
			}
			failed[e.Package] = true
			c := t.count(e.Package, name)
			c.Fail++
			c.Causes = append(c.Causes, run+": "+strings.Join(output[key], " | "))
		}
	}
	return sc.Err()
}

func (t *Tally) count(pkg, test string) *Count {
	key := pkg + "\x00" + test
	c := t.counts[key]
	if c == nil {
		c = &Count{Package: pkg, Test: test}
		t.counts[key] = c
	}
	return c
}

// Failures is the number of failed runs of all tests.
func (t *Tally) Failures() int {
	n := 0
	for _, c := range t.counts {
		n += c.Fail
	}
	return n
}

// Counts lists the tests, those that failed first, then by package and name.
func (t *Tally) Counts() []Count {
	list := make([]Count, 0, len(t.counts))
	for _, c := range t.counts {
		list = append(list, *c)
	}
	sort.Slice(list, func(i, j int) bool {
		if (list[i].Fail > 0) != (list[j].Fail > 0) {
			return list[i].Fail > 0
		}
		if list[i].Package != list[j].Package {
			return list[i].Package < list[j].Package
		}
		return list[i].Test < list[j].Test
	})
	return list
}

// Write prints one line per test, then each failure's cause.
func (t *Tally) Write(w io.Writer) {
	list := t.Counts()
	short := func(c Count) string {
		return strings.TrimPrefix(c.Package, "github.com/virtpod/virtpod/") + "." + c.Test
	}
	for _, c := range list {
		fmt.Fprintf(w, "%3d pass %3d fail %3d skip  %s\n", c.Pass, c.Fail, c.Skip, short(c))
	}
	for _, c := range list {
		for _, cause := range c.Causes {
			fmt.Fprintf(w, "FAIL %s in %s\n", short(c), cause)
		}
	}
}
