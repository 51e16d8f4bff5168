package runnerconfig_test

import (
	"slices"
	"strings"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
	"github.com/virtpod/virtpod/pkg/runnerconfig"
	"github.com/virtpod/virtpod/pkg/runnerconfig/runnerconfigtest"
)

func TestParseProbe(t *testing.T) {
	for in, want := range map[string]runnerconfig.Probe{
		"":                    {},
		"tcp:22":              {Kind: "tcp", Port: 22},
		"http:8080/healthz":   {Kind: "http", Port: 8080, Path: "/healthz"},
		"http:80":             {Kind: "http", Port: 80, Path: "/"},
		"http:80/a:b?c=d%20e": {Kind: "http", Port: 80, Path: "/a:b?c=d%20e"},
	} {
		got, err := runnerconfig.ParseProbe(in)
		if err != nil || got != want {
			t.Errorf("ParseProbe(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for in, msg := range map[string]string{
		"22":              "want tcp:PORT or http:PORT/PATH",
		"udp:53":          "want tcp:PORT or http:PORT/PATH",
		"tcp:ssh":         `"ssh" is not a port number`,
		"http:/x":         `"" is not a port number`,
		"tcp:99999999999": "is not a port number",
	} {
		if _, err := runnerconfig.ParseProbe(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseProbe(%q) = %v, want an error saying %q", in, err, msg)
		}
	}
	if d := (runnerconfig.Probe{Kind: "http", Port: 8080, Path: "/healthz"}).Describe(); d != "http :8080/healthz" {
		t.Errorf("Describe = %q", d)
	}
}

// TestProbeRoundTrip: the controller renders --readiness-probe and the runner reads the same
// probe back; no probe renders no flag.
func TestProbeRoundTrip(t *testing.T) {
	for _, p := range []runnerconfig.Probe{{}, {Kind: "tcp", Port: 22}, {Kind: "http", Port: 8080, Path: "/healthz?x=1"}} {
		c := firmwareConfig("")
		c.ReadinessProbe = p
		args := c.Args()
		has := slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--readiness-probe") })
		if has != p.IsSet() || p.IsSet() && !slices.Contains(args, "--readiness-probe="+p.String()) {
			t.Errorf("%+v: Args %q", p, args)
		}
		got, err := runnerconfigtest.Parse(args)
		if err != nil || got.ReadinessProbe != p {
			t.Errorf("%+v: read back %+v, %v", p, got.ReadinessProbe, err)
		}
	}
}

func TestProbeValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		probe   runnerconfig.Probe
		network vmv1.NetworkMode
		want    string
	}{
		"port 0":          {runnerconfig.Probe{Kind: "tcp"}, vmv1.NetworkPod, "--readiness-probe: port 0 is out of range 1-65535"},
		"port too high":   {runnerconfig.Probe{Kind: "http", Port: 65536, Path: "/"}, vmv1.NetworkPod, "port 65536 is out of range"},
		"tcp with a path": {runnerconfig.Probe{Kind: "tcp", Port: 22, Path: "/x"}, vmv1.NetworkPod, `"tcp:22/x": a tcp probe has no path`},
		"http, no path":   {runnerconfig.Probe{Kind: "http", Port: 80}, vmv1.NetworkPod, "the path must start with '/'"},
		"space in path":   {runnerconfig.Probe{Kind: "http", Port: 80, Path: "/a b"}, vmv1.NetworkPod, "no spaces"},
		"bad escape":      {runnerconfig.Probe{Kind: "http", Port: 80, Path: "/%zz"}, vmv1.NetworkPod, "URL-escaped"},
		"fragment":        {runnerconfig.Probe{Kind: "http", Port: 80, Path: "/#x"}, vmv1.NetworkPod, "'#'"},
		"unknown kind":    {runnerconfig.Probe{Kind: "grpc", Port: 80}, vmv1.NetworkPod, `"grpc" is not a probe kind`},
		"no pod network":  {runnerconfig.Probe{Kind: "tcp", Port: 22}, vmv1.NetworkNone, "--readiness-probe: needs --network=pod"},
	} {
		c := firmwareConfig("")
		c.ReadinessProbe, c.Network = tc.probe, tc.network
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error saying %q", name, err, tc.want)
		}
	}
}
