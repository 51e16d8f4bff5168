// Command report prints where a `make test` run spent its time: each build step (cold or
// cached) and its wall time, the test packages by wall time, the guests each package booted,
// and the total against CI's budget (docs/ci.md). tools/dev/ci/test.sh runs it last.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	steps := flag.String("steps", "", "steps.tsv: name, state, milliseconds, exit code per line")
	background := flag.String("background", "", "the same for the steps run beside the first builds")
	tests := flag.String("tests", "", "the go test output")
	times := flag.String("times", "", "testlog's per-test times")
	boots := flag.String("boots", "", "folder of boots-*.tsv files the test packages wrote")
	total := flag.Int("total", 0, "the run's wall time in seconds")
	out := flag.String("out", "", "also write the report here")
	flag.Parse()

	in, err := load(*steps, *background, *tests, *boots)
	if err == nil && *times != "" {
		if b, rerr := os.ReadFile(*times); rerr == nil {
			in.tests, err = parseTestTimes(string(b))
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	in.totalSeconds = *total
	var w io.Writer = os.Stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
	}
	fmt.Fprint(w, render(in))
}

// load reads the three inputs; a missing test log or boot folder (a run that failed in its
// builds) leaves those parts empty.
func load(steps, background, tests, boots string) (input, error) {
	var in input
	b, err := os.ReadFile(steps)
	if err != nil {
		return in, err
	}
	if in.steps, err = parseSteps(string(b)); err != nil {
		return in, err
	}
	if b, err := os.ReadFile(background); err == nil {
		if in.background, err = parseSteps(string(b)); err != nil {
			return in, err
		}
	}
	if b, err := os.ReadFile(tests); err == nil {
		in.packages = parseTestLog(string(b))
		in.failures = parseFailures(string(b))
	}
	files, _ := filepath.Glob(filepath.Join(boots, "boots-*.tsv"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return in, err
		}
		bs, err := parseBoots(string(b))
		if err != nil {
			return in, fmt.Errorf("%s: %w", f, err)
		}
		in.boots = append(in.boots, bs...)
	}
	return in, nil
}

func trimModule(pkg string) string {
	return strings.TrimPrefix(pkg, "github.com/virtpod/virtpod/")
}
