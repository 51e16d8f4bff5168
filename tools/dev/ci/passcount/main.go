// Command passcount reads `go test -json` output from several runs of the same packages (one
// file per run) and prints how often each top-level test passed, failed and was skipped, with
// the first lines a failing run's test printed at its failure (file:line messages): the stress
// mode's report (tools/dev/ci/stress.sh, docs/ci.md).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	flag.Usage = func() { fmt.Fprintln(os.Stderr, "usage: passcount RUN.json..."); flag.PrintDefaults() }
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	t := New()
	for _, name := range flag.Args() {
		if err := add(t, name); err != nil {
			fmt.Fprintln(os.Stderr, "passcount:", err)
			os.Exit(1)
		}
	}
	t.Write(os.Stdout)
	if t.Failures() > 0 {
		os.Exit(1)
	}
}

func add(t *Tally, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return t.AddRun(name, io.Reader(f))
}
