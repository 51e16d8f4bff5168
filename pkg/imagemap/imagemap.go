package imagemap

import (
	"fmt"
	"sort"
	"strings"
)

// Key is the ConfigMap data key that holds the map.
const Key = "images"

// Map resolves image references. The zero Map maps nothing.
type Map struct {
	exact map[string]string // pinned reference → replacement
	repos map[string]string // repository (any tag or digest of it) → replacement
}

// Problem is a line of the map that was ignored, and why.
type Problem struct {
	Line   int
	Text   string
	Reason string
}

func (p Problem) String() string { return fmt.Sprintf("line %d %q: %s", p.Line, p.Text, p.Reason) }

type entry struct {
	line     int
	text     string
	from, to string
}

// Parse reads the map: one mapping a line, `FROM TO`; `#` starts a comment. FROM is a pinned
// reference (tag or digest) matched exactly, or a repository matching any tag or digest of it;
// TO is a pinned reference. Bad lines are returned as problems and left out; the rest work.
func Parse(text string) (Map, []Problem) {
	var entries []entry
	var problems []Problem
	seen := map[string]int{}
	for i, raw := range strings.Split(text, "\n") {
		line := raw
		if c := strings.IndexByte(line, '#'); c >= 0 {
			line = line[:c]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		bad := func(reason string) {
			problems = append(problems, Problem{Line: i + 1, Text: strings.TrimSpace(raw), Reason: reason})
		}
		switch {
		case len(f) != 2:
			bad("want two image references, FROM TO")
		case !ValidReference(f[0]):
			bad(fmt.Sprintf("FROM %q is not an image reference such as registry.example.com/vm/kernel or registry.example.com/vm/kernel:6.1", f[0]))
		case !ValidReference(f[1]):
			bad(fmt.Sprintf("TO %q is not an image reference such as localhost/virtpod/runner:dev", f[1]))
		case !pinned(f[1]):
			bad(fmt.Sprintf("TO %q names no tag or digest; give one, e.g. %s:dev", f[1], f[1]))
		case f[0] == f[1]:
			bad("maps an image to itself")
		case seen[f[0]] != 0:
			bad(fmt.Sprintf("FROM %q is already mapped on line %d", f[0], seen[f[0]]))
		default:
			seen[f[0]] = i + 1
			entries = append(entries, entry{line: i + 1, text: strings.TrimSpace(raw), from: f[0], to: f[1]})
		}
	}
	entries, cyclic := dropCycles(entries)
	problems = append(problems, cyclic...)
	sort.Slice(problems, func(a, b int) bool { return problems[a].Line < problems[b].Line })
	m := Map{exact: map[string]string{}, repos: map[string]string{}}
	for _, e := range entries {
		if pinned(e.from) {
			m.exact[e.from] = e.to
		} else {
			m.repos[e.from] = e.to
		}
	}
	return m, problems
}

// dropCycles removes entries that, applied one after another, would lead back to themselves
// (A → B, B → A). The map is applied once, so a cycle cannot loop, but it is surely a mistake.
// A repository mapped to a tag of itself (runner → runner:dev) is the dev loop's normal case,
// not a cycle.
func dropCycles(entries []entry) ([]entry, []Problem) {
	next := func(i int) int {
		to := entries[i].to
		for j, e := range entries {
			if j != i && (e.from == to || (!pinned(e.from) && e.from == Repository(to))) {
				return j
			}
		}
		return -1
	}
	onCycle := map[int][]string{}
	for start := range entries {
		path := []int{start}
		visited := map[int]bool{start: true}
		for cur := next(start); cur >= 0; cur = next(cur) {
			if cur == start {
				names := []string{}
				for _, p := range path {
					names = append(names, entries[p].from)
				}
				onCycle[start] = append(names, entries[start].from)
				break
			}
			if visited[cur] {
				break // a cycle elsewhere; its own members report it
			}
			visited[cur] = true
			path = append(path, cur)
		}
	}
	var kept []entry
	var problems []Problem
	for i, e := range entries {
		if c, ok := onCycle[i]; ok {
			problems = append(problems, Problem{Line: e.line, Text: e.text, Reason: "part of a cycle: " + strings.Join(c, " → ")})
			continue
		}
		kept = append(kept, e)
	}
	return kept, problems
}

// Resolve returns the image to use for ref: its exact mapping, else its repository's, else ref.
func (m Map) Resolve(ref string) string {
	if to, ok := m.exact[ref]; ok {
		return to
	}
	if to, ok := m.repos[Repository(ref)]; ok {
		return to
	}
	return ref
}

// Len is the number of mappings in effect.
func (m Map) Len() int { return len(m.exact) + len(m.repos) }
