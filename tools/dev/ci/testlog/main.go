// Command testlog reads `go test -json` on stdin and writes what `go test` without -json would
// have printed (package results, and the output of failed tests only), plus each test's wall
// time to a TSV file the CI report ranks (docs/ci.md): the per-test figures that say where a
// package's minutes go.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// queuedMarker starts a test's log line that says how long the test waited for its turn after
// it began (tests/e2e's parallel phase queues its short tests itself): that wait is not the
// test's own time, so it is taken off the time recorded. tests/e2e writes the same words.
const queuedMarker = "ci: queued "

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

func main() {
	times := flag.String("times", "", "write package, test, seconds and result per finished test here")
	flag.Parse()
	var tsv io.Writer = io.Discard
	if *times != "" {
		f, err := os.Create(*times)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testlog:", err)
			os.Exit(1)
		}
		defer f.Close()
		tsv = f
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	if err := filter(os.Stdin, out, tsv); err != nil {
		fmt.Fprintln(os.Stderr, "testlog:", err)
		os.Exit(1)
	}
}

// filter turns the event stream into plain output. A test's output is held until it ends and
// printed only if it failed; a package's own output (its ok or FAIL line, a panic, a build
// error) is printed at once. A line that is not an event is passed on as it is.
func filter(in io.Reader, out *bufio.Writer, tsv io.Writer) error {
	held := map[string][]string{}  // package + test → its output so far
	queued := map[string]float64{} // package + test → seconds it said it waited for its turn
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			out.Write(line)
			out.WriteByte('\n')
			continue
		}
		key := e.Package + " " + e.Test
		switch {
		case e.Action == "build-output":
			out.WriteString(e.Output)
		case e.Test == "" && e.Action == "output":
			if o := e.Output; o != "PASS\n" && !strings.HasPrefix(o, "=== RUN") {
				out.WriteString(o)
			}
		case e.Action == "output":
			held[key] = append(held[key], e.Output)
			if _, after, ok := strings.Cut(e.Output, queuedMarker); ok {
				if secs, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(after), "s"), 64); err == nil {
					queued[key] += secs
				}
			}
		case e.Test != "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
			if e.Action == "fail" {
				for _, o := range held[key] {
					if !strings.HasPrefix(strings.TrimSpace(o), "=== ") {
						out.WriteString(o)
					}
				}
			}
			delete(held, key)
			fmt.Fprintf(tsv, "%s\t%s\t%.2f\t%s\n", e.Package, e.Test, max(e.Elapsed-queued[key], 0), e.Action)
			delete(queued, key)
		}
		if e.Test == "" && (e.Action == "pass" || e.Action == "fail") {
			out.Flush()
		}
	}
	return sc.Err()
}
