package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

type step struct {
	name, state string
	took        time.Duration
	exit        int
}

type pkgResult struct {
	name   string
	took   time.Duration
	failed bool
}

// boot is one line of a boots-*.tsv file: how many guests of a kind one test booted.
type boot struct {
	pkg, test, kind string
	count           int
}

type input struct {
	steps        []step
	background   []step
	packages     []pkgResult
	tests        []testTime
	boots        []boot
	failures     []failure
	totalSeconds int
}

// failure is a failed test and the first lines it reported from its own code
// ("x_test.go:12: ..."), which the report repeats at its end: CI shows a run's last lines, and
// a failed test's dumps (events, logs) would push its reason out of them.
type failure struct {
	test  string
	lines []string
}

// testTime is one top-level test's wall time, from testlog's TSV.
type testTime struct {
	pkg, name string
	took      time.Duration
	failed    bool
}

// parseTestTimes reads testlog's lines (package, test, seconds, result), keeping top-level
// tests: a subtest's time is its parent's already.
func parseTestTimes(s string) ([]testTime, error) {
	var out []testTime
	for i, line := range lines(s) {
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("test times line %d: %q is not package, test, seconds, result", i+1, line)
		}
		if strings.Contains(f[1], "/") {
			continue
		}
		sec, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			return nil, fmt.Errorf("test times line %d: %v", i+1, err)
		}
		out = append(out, testTime{pkg: f[0], name: f[1], took: time.Duration(sec * float64(time.Second)), failed: f[3] == "fail"})
	}
	return out, nil
}

func parseSteps(s string) ([]step, error) {
	var out []step
	for i, line := range lines(s) {
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("steps line %d: want name, state, ms, exit code: %q", i+1, line)
		}
		ms, err1 := strconv.Atoi(f[2])
		rc, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("steps line %d: %q", i+1, line)
		}
		out = append(out, step{name: f[0], state: f[1], took: time.Duration(ms) * time.Millisecond, exit: rc})
	}
	return out, nil
}

// go test's per-package summary: "ok  \tpkg\t12.3s", "FAIL\tpkg\t4.5s", and packages without
// tests ("?   \tpkg\t[no test files]"), which are not counted.
var pkgLine = regexp.MustCompile(`^(ok|FAIL)\s+(\S+)\s+([0-9.]+)s`)

func parseTestLog(s string) []pkgResult {
	var out []pkgResult
	for _, line := range lines(s) {
		m := pkgLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		sec, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		out = append(out, pkgResult{name: m[2], took: time.Duration(sec * float64(time.Second)), failed: m[1] == "FAIL"})
	}
	return out
}

// An assertion line a test printed (t.Errorf, t.Fatalf, t.Logf), and the FAIL line after a
// failed test's output.
var (
	assertLine = regexp.MustCompile(`^\s+(\S+_test\.go:\d+: .*)`)
	failLine   = regexp.MustCompile(`^\s*--- FAIL: (\S+)`)
)

// failureLines keeps this many of a failed test's lines, each cut to lineMax bytes: go test
// does not tell an error's line from a log's, so the report keeps enough of them.
const (
	failureLines = 12
	lineMax      = 300
)

// parseFailures reads go test's plain output, where a failed test's held output comes just
// before its "--- FAIL" line; subtests fail before their parent, which gets no lines of its own.
func parseFailures(s string) []failure {
	var out []failure
	var pending []string
	for _, line := range lines(s) {
		if m := failLine.FindStringSubmatch(line); m != nil {
			if len(pending) > 0 {
				out = append(out, failure{test: m[1], lines: pending})
			} else if !strings.Contains(m[1], "/") && !subtestOf(out, m[1]) {
				out = append(out, failure{test: m[1]})
			}
			pending = nil
			continue
		}
		if pkgLine.MatchString(line) {
			pending = nil
			continue
		}
		if m := assertLine.FindStringSubmatch(line); m != nil && len(pending) < failureLines {
			l := m[1]
			if len(l) > lineMax {
				l = l[:lineMax] + "…"
			}
			pending = append(pending, l)
		}
	}
	return out
}

func subtestOf(fs []failure, parent string) bool {
	return slices.ContainsFunc(fs, func(f failure) bool { return strings.HasPrefix(f.test, parent+"/") })
}

func parseBoots(s string) ([]boot, error) {
	var out []boot
	for i, line := range lines(s) {
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("line %d: want package, test, kind, count: %q", i+1, line)
		}
		n, err := strconv.Atoi(f[3])
		if err != nil {
			return nil, fmt.Errorf("line %d: count %q", i+1, f[3])
		}
		out = append(out, boot{pkg: f[0], test: f[1], kind: f[2], count: n})
	}
	return out, nil
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimRight(l, "\r"); strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}
