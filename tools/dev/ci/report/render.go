package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// slowest is how many test packages the report names; the rest are summed.
const slowest = 8

// slowestTests is how many tests the report names.
const slowestTests = 15

func render(in input) string {
	var b strings.Builder
	fmt.Fprintf(&b, "== CI timing: %s in all (budget: cold <= 60m, warm <= 20m; CI's limit 90m)\n",
		dur(time.Duration(in.totalSeconds)*time.Second))
	fmt.Fprintf(&b, "steps:%s\n", stepList(in.steps))
	if len(in.background) > 0 {
		fmt.Fprintf(&b, "beside the first builds:%s\n", stepList(in.background))
	}
	if len(in.packages) > 0 {
		b.WriteString(testLine(in.packages))
	}
	if len(in.tests) > 0 {
		b.WriteString(slowTests(in.tests))
	}
	if len(in.boots) > 0 {
		b.WriteString(bootLines(in.boots))
	}
	for _, f := range in.failures {
		fmt.Fprintf(&b, "FAILED %s", f.test)
		if len(f.lines) == 0 {
			b.WriteString(" (no line of its own: see its output above)")
		}
		b.WriteString("\n")
		for _, l := range f.lines {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	return b.String()
}

func stepList(steps []step) string {
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, " %s %s", s.name, dur(s.took))
		if s.state != "-" {
			fmt.Fprintf(&b, " (%s)", s.state)
		}
		if s.exit != 0 {
			fmt.Fprintf(&b, " FAILED(%d)", s.exit)
		}
		b.WriteString(",")
	}
	return strings.TrimSuffix(b.String(), ",")
}

func testLine(pkgs []pkgResult) string {
	sorted := slices.Clone(pkgs)
	slices.SortStableFunc(sorted, func(a, b pkgResult) int { return cmp.Compare(b.took, a.took) })
	failed := 0
	var sum time.Duration
	for _, p := range pkgs {
		sum += p.took
		if p.failed {
			failed++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "test packages: %d (%d failed), %s of package time; slowest:", len(pkgs), failed, dur(sum))
	var rest time.Duration
	for i, p := range sorted {
		if i >= slowest {
			rest += p.took
			continue
		}
		fmt.Fprintf(&b, " %s %s", trimModule(p.name), dur(p.took))
		if p.failed {
			b.WriteString(" FAILED")
		}
		b.WriteString(",")
	}
	out := strings.TrimSuffix(b.String(), ",")
	if len(sorted) > slowest {
		out += fmt.Sprintf("; the other %d together %s", len(sorted)-slowest, dur(rest))
	}
	return out + "\n"
}

// slowTests names the slowest top-level tests, with their packages.
func slowTests(tests []testTime) string {
	sorted := slices.Clone(tests)
	slices.SortStableFunc(sorted, func(a, b testTime) int { return cmp.Compare(b.took, a.took) })
	var b strings.Builder
	b.WriteString("slowest tests:")
	for i, t := range sorted {
		if i >= slowestTests {
			break
		}
		fmt.Fprintf(&b, " %s.%s %s", trimModule(t.pkg), t.name, dur(t.took))
		if t.failed {
			b.WriteString(" FAILED")
		}
		b.WriteString(",")
	}
	return strings.TrimSuffix(b.String(), ",") + "\n"
}

// bootLines: per package and kind, the total and the tests that booted more than one guest.
func bootLines(boots []boot) string {
	type key struct{ pkg, kind string }
	totals := map[key]int{}
	multi := map[key][]string{}
	var keys []key
	for _, bt := range boots {
		k := key{bt.pkg, bt.kind}
		if _, ok := totals[k]; !ok {
			keys = append(keys, k)
		}
		totals[k] += bt.count
		if bt.count > 1 {
			multi[k] = append(multi[k], fmt.Sprintf("%s %d", bt.test, bt.count))
		}
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Or(cmp.Compare(a.pkg, b.pkg), cmp.Compare(a.kind, b.kind)) })
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "boots: %s %d %s", k.pkg, totals[k], k.kind)
		if m := multi[k]; len(m) > 0 {
			slices.Sort(m)
			fmt.Fprintf(&b, " (more than one: %s)", strings.Join(m, ", "))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// dur prints 3m05s, 42.1s or 850ms: short, and exact enough to compare two runs.
func dur(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d >= time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	default:
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
}
