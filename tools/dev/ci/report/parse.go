package main

import (
	"fmt"
	"regexp"
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
	totalSeconds int
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
