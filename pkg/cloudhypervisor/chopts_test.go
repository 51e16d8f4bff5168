package cloudhypervisor_test

import (
	"errors"
	"strings"
	"testing"
)

// apiSocket is where cloud-hypervisor takes its API socket from the value of --api-socket, as
// parse_api_socket does (cloud-hypervisor/src/main.rs): the value is read as the options path=
// and fd= with its OptionParser, errors ignored; fd= wins, then path=, and when neither is set
// the whole value is the path.
func apiSocket(value string) (path, fd string) {
	opts := chParse(value, "path", "fd")
	if opts["fd"] != "" {
		return "", opts["fd"]
	}
	if opts["path"] != "" {
		return opts["path"], ""
	}
	return value, ""
}

// chParse is cloud-hypervisor's OptionParser.parse (option_parser/src/lib.rs) for options that
// take a value. Like it, it stops at the first error and keeps what it set before.
func chParse(input string, known ...string) map[string]string {
	set := map[string]string{}
	if strings.TrimSpace(input) == "" {
		return set
	}
	opts, err := splitCommas(input)
	if err != nil {
		return set
	}
	for _, o := range opts {
		k, v, ok := strings.Cut(o, "=")
		if !ok || !contains(known, k) {
			return set
		}
		set[k] = strings.TrimSpace(v) // Rust's trim and Go's TrimSpace share Unicode's White_Space
	}
	return set
}

// splitCommas: commas separate options except inside [...] or "...", and quotes are dropped.
func splitCommas(s string) ([]string, error) {
	var list []string
	var cur strings.Builder
	depth, quoted := 0, false
	for _, c := range strings.TrimSpace(s) {
		switch {
		case c == '[':
			depth++
			cur.WriteRune(c)
		case c == ']':
			if depth--; depth < 0 {
				return nil, errors.New("unbalanced ]")
			}
			cur.WriteRune(c)
		case c == '"':
			quoted = !quoted
		case c == ',' && depth == 0 && !quoted:
			list = append(list, cur.String())
			cur.Reset()
		default:
			cur.WriteRune(c)
		}
	}
	if depth != 0 || quoted {
		return nil, errors.New("unbalanced [ or \"")
	}
	return append(list, cur.String()), nil
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// TestAPISocketModel pins the model to cloud-hypervisor's own option parser tests and to
// parse_api_socket's fallback.
func TestAPISocketModel(t *testing.T) {
	for _, tc := range []struct{ in, path, fd string }{
		{"path=/run/ch.sock", "/run/ch.sock", ""},
		{"fd=3", "", "3"},
		{"/run/ch.sock", "/run/ch.sock", ""},             // a bare path: unknown option, so the whole value
		{"path=/a,fd=3", "", "3"},                        // a comma in path= injects fd=
		{`path="/a,b"`, "/a,b", ""},                      // quotes keep the comma and are dropped
		{"path= /a ", "/a", ""},                          // values are trimmed
		{"path=/a,x=1", "/a", ""},                        // an error keeps what was set before it
		{"path=/a[", "path=/a[", ""},                     // bad syntax: the whole value
		{"/a,fd=3", "/a,fd=3", ""},                       // the first option fails before fd= is read
		{"path=", "path=", ""},                           // an empty value counts as unset
		{"path=/a,path=[1,2]", "[1,2]", ""},              // a later option overrides
		{`x=y,path="/b"`, `x=y,path="/b"`, ""},           // unknown first option
		{" path=/a=b ", "/a=b", ""},                      // the value runs to the comma, '=' included
		{"fd=3,path=/a", "", "3"},                        // fd= wins
		{"\u00a0path=/a\u00a0", "/a", ""},                // Unicode white space is trimmed
		{"path=a,b", "a", ""},                            // unknown option b: path= stays set
		{"./fd=3/ch.sock", "./fd=3/ch.sock", ""},         // a relative path made explicit
		{"./x,path=/etc,fd=9", "./x,path=/etc,fd=9", ""}, // nothing after a failing first option
	} {
		if path, fd := apiSocket(tc.in); path != tc.path || fd != tc.fd {
			t.Errorf("apiSocket(%q) = path %q fd %q, want path %q fd %q", tc.in, path, fd, tc.path, tc.fd)
		}
	}
}
