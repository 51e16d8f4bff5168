package imagemap

import (
	"fmt"
	"sort"
	"strings"
)

// Key is the ConfigMap data key that holds the map.
const Key = "images"

// Map resolves image references. The zero Map maps nothing. Both maps are keyed by normalised
// references, so a line matches however a VM spells the same image.
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
	// key is FROM normalised: its whole reference when pinned, else its repository.
	key    string
	pinned bool
}

// fromKey is what a FROM matches: one pinned reference, or every reference of a repository.
func fromKey(from string) (key string, isPinned bool) {
	full, repo := normalised(from)
	if pinned(from) {
		return full, true
	}
	return repo, false
}

// Parse reads the map: one mapping a line, `FROM TO`; `#` starts a comment. FROM is a pinned
// reference (tag or digest) matched exactly, or a repository matching any tag or digest of it;
// TO is a pinned reference. References are compared normalised (see normalised), so two
// spellings of one FROM are a duplicate. Bad lines are returned as problems and left out; the
// rest work.
func Parse(text string) (Map, []Problem) {
	var entries []entry
	var problems []Problem
	seen := map[string]entry{} // by key: a FROM mapped once, however it is spelled
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
		if reason := checkFields(f); reason != "" {
			bad(reason)
			continue
		}
		e := entry{line: i + 1, text: strings.TrimSpace(raw), from: f[0], to: f[1]}
		e.key, e.pinned = fromKey(e.from)
		toFull, _ := normalised(e.to)
		switch prev, dup := seen[e.key]; {
		case e.pinned && e.key == toFull:
			bad("maps an image to itself")
		case dup && prev.from == e.from:
			bad(fmt.Sprintf("FROM %q is already mapped on line %d", e.from, prev.line))
		case dup:
			bad(fmt.Sprintf("FROM %q is already mapped on line %d, spelled %q", e.from, prev.line, prev.from))
		default:
			seen[e.key] = e
			entries = append(entries, e)
		}
	}
	entries, cyclic := dropCycles(entries)
	problems = append(problems, cyclic...)
	sort.Slice(problems, func(a, b int) bool { return problems[a].Line < problems[b].Line })
	m := Map{exact: map[string]string{}, repos: map[string]string{}}
	for _, e := range entries {
		if e.pinned {
			m.exact[e.key] = e.to
		} else {
			m.repos[e.key] = e.to
		}
	}
	return m, problems
}

// checkFields says what is wrong with a line's fields on their own, or "" when nothing is.
func checkFields(f []string) string {
	switch {
	case len(f) != 2:
		return "want two image references, FROM TO"
	case !ValidReference(f[0]):
		return fmt.Sprintf("FROM %q is not an image reference such as registry.example.com/vm/kernel or registry.example.com/vm/kernel:6.1", f[0])
	case !ValidReference(f[1]):
		return fmt.Sprintf("TO %q is not an image reference such as localhost/virtpod/runner:dev", f[1])
	case !pinned(f[1]):
		return fmt.Sprintf("TO %q names no tag or digest; give one, e.g. %s:dev", f[1], f[1])
	}
	return ""
}

// dropCycles removes entries that, applied one after another, would lead back to themselves
// (A → B, B → A). The map is applied once, so a cycle cannot loop, but it is surely a mistake.
// A repository mapped to a tag of itself (runner → runner:dev) is the dev loop's normal case,
// not a cycle.
func dropCycles(entries []entry) ([]entry, []Problem) {
	next := func(i int) int {
		full, repo := normalised(entries[i].to)
		for j, e := range entries {
			if j != i && (e.pinned && e.key == full || !e.pinned && e.key == repo) {
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
// ref is compared normalised, so docker.io/library/busybox:latest finds a line for busybox.
func (m Map) Resolve(ref string) string {
	if len(m.exact) == 0 && len(m.repos) == 0 {
		return ref // the map is off or empty: no parsing on every render
	}
	full, repo := normalised(ref)
	if to, ok := m.exact[full]; ok {
		return to
	}
	if to, ok := m.repos[repo]; ok {
		return to
	}
	return ref
}

// Len is the number of mappings in effect.
func (m Map) Len() int { return len(m.exact) + len(m.repos) }
