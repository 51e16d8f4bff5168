package main

import (
	"bufio"
	"strings"
	"testing"
)

// TestFilter: a passing test's output is dropped, a failing one's kept with its --- FAIL line,
// package results and build errors pass through, and every finished test gets its time, less
// what it said it waited for its turn.
func TestFilter(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"start","Package":"a"}`,
		`{"Action":"run","Package":"a","Test":"TestOK"}`,
		`{"Action":"output","Package":"a","Test":"TestOK","Output":"=== RUN   TestOK\n"}`,
		`{"Action":"output","Package":"a","Test":"TestOK","Output":"    ok_test.go:3: chatter\n"}`,
		`{"Action":"output","Package":"a","Test":"TestOK","Output":"--- PASS: TestOK (1.50s)\n"}`,
		`{"Action":"pass","Package":"a","Test":"TestOK","Elapsed":1.5}`,
		`{"Action":"output","Package":"a","Test":"TestQueued","Output":"    main_test.go:170: ci: queued 120.25s\n"}`,
		`{"Action":"pass","Package":"a","Test":"TestQueued","Elapsed":130.5}`,
		`{"Action":"output","Package":"a","Test":"TestBad","Output":"=== RUN   TestBad\n"}`,
		`{"Action":"output","Package":"a","Test":"TestBad","Output":"    bad_test.go:9: want 2\n"}`,
		`{"Action":"output","Package":"a","Test":"TestBad","Output":"--- FAIL: TestBad (0.25s)\n"}`,
		`{"Action":"fail","Package":"a","Test":"TestBad","Elapsed":0.25}`,
		`{"Action":"output","Package":"a","Output":"FAIL\n"}`,
		`{"Action":"output","Package":"a","Output":"FAIL\ta\t1.80s\n"}`,
		`{"Action":"fail","Package":"a","Elapsed":1.8}`,
		`{"ImportPath":"b","Action":"build-output","Output":"b/x.go:1:1: syntax error\n"}`,
		`not json at all`,
		`{"Action":"output","Package":"c","Output":"PASS\n"}`,
		`{"Action":"output","Package":"c","Output":"ok  \tc\t0.01s\n"}`,
	}, "\n")
	var out strings.Builder
	var times strings.Builder
	w := bufio.NewWriter(&out)
	if err := filter(strings.NewReader(in), w, &times); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	want := "    bad_test.go:9: want 2\n--- FAIL: TestBad (0.25s)\nFAIL\nFAIL\ta\t1.80s\nb/x.go:1:1: syntax error\nnot json at all\nok  \tc\t0.01s\n"
	if out.String() != want {
		t.Errorf("output\n%q\nwant\n%q", out.String(), want)
	}
	if wantT := "a\tTestOK\t1.50\tpass\na\tTestQueued\t10.25\tpass\na\tTestBad\t0.25\tfail\n"; times.String() != wantT {
		t.Errorf("times %q, want %q", times.String(), wantT)
	}
}
