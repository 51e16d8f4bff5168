package qemu_test

import (
	"slices"
	"strings"
	"testing"
)

// opt is one key=value of a QEMU option list.
type opt struct{ key, value string }

// parseOpts reads a QEMU option list ("-drive if=none,file.filename=...") the way QEMU's
// QemuOpts parser does (util/qemu-option.c, get_opt_name_value): options are separated by
// commas, a doubled comma inside a value is a literal comma, and a first option without '='
// is the value of the option's implied key (implied; "" when the option has none).
func parseOpts(s, implied string) []opt {
	var opts []opt
	for first := true; s != ""; first = false {
		n := strings.IndexAny(s, "=,")
		if n < 0 {
			n = len(s)
		}
		var o opt
		switch {
		case n < len(s) && s[n] == '=':
			o.key = s[:n]
			o.value, s = optValue(s[n+1:])
		case first && implied != "":
			o.key = implied
			o.value, s = optValue(s)
		default: // a bare flag such as "on"; QEMU reads it as key=on
			o.key, o.value, s = s[:n], "on", s[n:]
		}
		opts = append(opts, o)
		s = strings.TrimPrefix(s, ",")
	}
	return opts
}

// optValue reads a value up to the first single comma (get_opt_value).
func optValue(p string) (value, rest string) {
	var b strings.Builder
	for {
		i := strings.IndexByte(p, ',')
		if i < 0 {
			b.WriteString(p)
			return b.String(), ""
		}
		if i+1 < len(p) && p[i+1] == ',' {
			b.WriteString(p[:i+1])
			p = p[i+2:]
			continue
		}
		b.WriteString(p[:i])
		return b.String(), p[i:]
	}
}

// TestParseOpts pins the parser the fuzz target trusts to QEMU's reading of option lists.
func TestParseOpts(t *testing.T) {
	for _, tc := range []struct {
		in, implied string
		want        []opt
	}{
		{"if=none,file.filename=/a,,b,cache=none", "", []opt{{"if", "none"}, {"file.filename", "/a,b"}, {"cache", "none"}}},
		{"guest=a,,,,b=c", "guest", []opt{{"guest", "a,,b=c"}}},
		{"a,,b,process=p", "guest", []opt{{"guest", "a,b"}, {"process", "p"}}},
		{"socket,id=x,server=on", "backend", []opt{{"backend", "socket"}, {"id", "x"}, {"server", "on"}}},
		{"path=x,,,wait=off", "", []opt{{"path", "x,"}, {"wait", "off"}}},
		{"k=v=w,flag", "", []opt{{"k", "v=w"}, {"flag", "on"}}},
		{"k=,", "", []opt{{"k", ""}}},
	} {
		if got := parseOpts(tc.in, tc.implied); !slices.Equal(got, tc.want) {
			t.Errorf("parseOpts(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
