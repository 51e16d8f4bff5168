package runnerconfig

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Readiness probe kinds: a TCP connect, or an HTTP GET answered with 2xx or 3xx.
const (
	ProbeTCP  = "tcp"
	ProbeHTTP = "http"
)

// Probe is the guest readiness probe, --readiness-probe: tcp:PORT or http:PORT/PATH. The runner
// checks it at the pod IP, and /readyz is 200 only while the last check passed. The zero Probe
// is none.
type Probe struct {
	Kind string // tcp or http; "" for none
	Port int32
	Path string // http only: the request's path (and query), starting with '/'
}

// IsSet reports whether a probe is configured.
func (p Probe) IsSet() bool { return p != Probe{} }

// String renders the flag's value, which ParseProbe reads back: "" for none.
func (p Probe) String() string {
	if !p.IsSet() {
		return ""
	}
	return fmt.Sprintf("%s:%d%s", p.Kind, p.Port, p.Path)
}

// Describe is the probe in messages: "tcp :22", "http :8080/healthz".
func (p Probe) Describe() string {
	return fmt.Sprintf("%s :%d%s", p.Kind, p.Port, p.Path)
}

// ParseProbe reads tcp:PORT or http:PORT[/PATH] (an http probe without a path gets "/").
func ParseProbe(s string) (Probe, error) {
	if s == "" {
		return Probe{}, nil
	}
	kind, rest, ok := strings.Cut(s, ":")
	if !ok || (kind != ProbeTCP && kind != ProbeHTTP) {
		return Probe{}, fmt.Errorf("readiness probe %q: want tcp:PORT or http:PORT/PATH", s)
	}
	num, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		num, path = rest[:i], rest[i:]
	}
	n, err := strconv.ParseInt(num, 10, 32)
	if err != nil {
		return Probe{}, fmt.Errorf("readiness probe %q: %q is not a port number", s, num)
	}
	p := Probe{Kind: kind, Port: int32(n), Path: path}
	if kind == ProbeHTTP && path == "" {
		p.Path = "/"
	}
	return p, nil
}

// validate reports what is wrong with a set probe, by the flag's name.
func (p Probe) validate() error {
	var errs []error
	switch p.Kind {
	case ProbeTCP:
		if p.Path != "" {
			errs = append(errs, fmt.Errorf("--readiness-probe: %q: a tcp probe has no path; use http:PORT/PATH to check one", p.String()))
		}
	case ProbeHTTP:
		_, err := url.ParseRequestURI(p.Path)
		if err != nil || !strings.HasPrefix(p.Path, "/") || len(p.Path) > 1024 || strings.ContainsFunc(p.Path, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '#' }) {
			errs = append(errs, fmt.Errorf("--readiness-probe: %q: the path must start with '/' and hold at most 1024 printable ASCII characters (URL-escaped), no spaces or '#'", p.String()))
		}
	default:
		errs = append(errs, fmt.Errorf("--readiness-probe: %q is not a probe kind; use tcp:PORT or http:PORT/PATH", p.Kind))
	}
	if p.Port < 1 || p.Port > 65535 {
		errs = append(errs, fmt.Errorf("--readiness-probe: port %d is out of range 1-65535", p.Port))
	}
	return errors.Join(errs...)
}

// probeValue is the --readiness-probe flag.
type probeValue struct{ p *Probe }

func (v probeValue) String() string {
	if v.p == nil {
		return ""
	}
	return v.p.String()
}

func (v probeValue) Set(s string) error {
	p, err := ParseProbe(s)
	if err != nil {
		return err
	}
	*v.p = p
	return nil
}
