package podnat

import (
	"flag"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/virtpod/virtpod/tests/netnstest"
	"github.com/virtpod/virtpod/tests/prereq"
)

var update = flag.Bool("update", false, "rewrite the golden file")

var cfg = Config{
	PodInterface: "eth0", PodIP: net.IPv4(10, 213, 1, 2), Bridge: "vp-br0", GuestIP: net.IPv4(10, 0, 2, 2),
	Ports: []Port{{"TCP", 80}, {"UDP", 53}, {"TCP", 22}},
}

// dual is cfg in a dual-stack pod.
var dual = func() Config {
	c := cfg
	c.PodIP6, c.GuestIP6 = net.ParseIP("fd00:213:1::2"), net.ParseIP("fd10:0:2::2")
	return c
}()

// render lists the rules chain by chain, the ip6 table's after the ip table's.
func render(rules []Rule) string {
	var b strings.Builder
	for _, six := range []bool{false, true} {
		if six && !slices.ContainsFunc(rules, func(r Rule) bool { return r.IPv6 }) {
			break
		}
		if six {
			b.WriteString("table ip6\n")
		}
		for _, ch := range Chains {
			b.WriteString("chain " + string(ch) + "\n")
			for _, r := range rules {
				if r.Chain == ch && r.IPv6 == six {
					b.WriteString("\t" + r.String() + "\n")
				}
			}
		}
	}
	return b.String()
}

// TestRulesGolden: every declared port (TCP and UDP) DNATed from the pod IP, the guest
// masqueraded out of the pod interface, and nothing else forwarded.
func TestRulesGolden(t *testing.T) {
	for name, c := range map[string]Config{"rules.golden": cfg, "noports.golden": {PodInterface: "eth0", PodIP: cfg.PodIP, Bridge: "vp-br0", GuestIP: cfg.GuestIP},
		"dual-stack.golden": dual, "ipv6-only.golden": {PodInterface: "eth0", Bridge: "vp-br0", PodIP6: dual.PodIP6, GuestIP6: dual.GuestIP6, Ports: cfg.Ports}} {
		rules, err := Rules(c)
		if err != nil {
			t.Fatal(err)
		}
		got := render(rules)
		golden := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("rules differ from %s (go test -update to accept):\n%s", golden, got)
		}
	}
}

func TestRulesRefuseBadInput(t *testing.T) {
	for name, tc := range map[string]struct {
		mod  func(*Config)
		want string
	}{
		"no pod interface": {func(c *Config) { c.PodInterface = "" }, "pod interface name"},
		"long bridge name": {func(c *Config) { c.Bridge = "a-very-long-bridge" }, "bridge name"},
		"IPv6 pod IP":      {func(c *Config) { c.PodIP = net.ParseIP("fd00::2") }, "pod IP"},
		"no guest IP":      {func(c *Config) { c.GuestIP = nil }, "guest IP"},
		"port 0":           {func(c *Config) { c.Ports = []Port{{"TCP", 0}} }, "port 0/TCP"},
		"SCTP":             {func(c *Config) { c.Ports = []Port{{"SCTP", 9}} }, "port 9/SCTP"},
		"pod IPv6 alone":   {func(c *Config) { c.PodIP6 = net.ParseIP("fd00::2") }, "give both or neither"},
		"IPv4 as IPv6":     {func(c *Config) { c.PodIP6, c.GuestIP6 = net.ParseIP("fd00::2"), c.GuestIP }, "guest IPv6"},
		"link-local IPv6":  {func(c *Config) { c.PodIP6, c.GuestIP6 = net.ParseIP("fe80::2"), net.ParseIP("fd10:0:2::2") }, "pod IPv6"},
	} {
		c := cfg
		tc.mod(&c)
		if _, err := Rules(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Rules() = %v, want an error naming %q", name, err, tc.want)
		}
	}
}

// TestInstallInKernel installs the tables of a dual-stack pod twice in a fresh network namespace
// (a runner restarted in its pod replaces them) and reads them back: each family's chains with
// their hooks and policies, and as many rules in each as Rules says. What the rules do to packets
// is the runner's masquerade test.
func TestInstallInKernel(t *testing.T) {
	prereq.Need(t, os.Geteuid() == 0, "needs root: a network namespace and nftables")
	type result struct {
		chains []*nftables.Chain
		rules  map[string]int // by family/chain
		err    error
	}
	var r result
	r.err = netnstest.Run(func() error {
		for range 2 {
			if err := Install(dual); err != nil {
				return err
			}
		}
		conn, err := nftables.New()
		if err != nil {
			return err
		}
		r.rules = map[string]int{}
		for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
			chains, err := conn.ListChainsOfTableFamily(fam)
			if err != nil {
				return err
			}
			for _, ch := range chains {
				if ch.Table.Name != Table {
					continue
				}
				r.chains = append(r.chains, ch)
				rules, err := conn.GetRules(ch.Table, ch)
				if err != nil {
					return err
				}
				r.rules[familyName(fam)+"/"+ch.Name] = len(rules)
			}
		}
		return nil
	})
	if r.err != nil {
		t.Fatal(r.err)
	}
	rules, _ := Rules(dual)
	want := map[string]int{}
	for _, rule := range rules {
		fam := nftables.TableFamilyIPv4
		if rule.IPv6 {
			fam = nftables.TableFamilyIPv6
		}
		want[familyName(fam)+"/"+string(rule.Chain)]++
	}
	if len(r.chains) != 2*len(Chains) {
		t.Fatalf("tables %s have %d chains, want %d in each family (after two installs)", Table, len(r.chains), len(Chains))
	}
	for _, ch := range r.chains {
		key := familyName(ch.Table.Family) + "/" + ch.Name
		if r.rules[key] != want[key] {
			t.Errorf("chain %s: %d rules in the kernel, want %d", key, r.rules[key], want[key])
		}
		if ch.Name == string(Forward) && (ch.Policy == nil || *ch.Policy != nftables.ChainPolicyDrop) {
			t.Errorf("chain forward: policy %v, want drop", ch.Policy)
		}
		if ch.Name != string(Forward) && ch.Type != nftables.ChainTypeNAT {
			t.Errorf("chain %s: type %s, want nat", ch.Name, ch.Type)
		}
	}
}

func familyName(f nftables.TableFamily) string {
	if f == nftables.TableFamilyIPv6 {
		return "ip6"
	}
	return "ip"
}
