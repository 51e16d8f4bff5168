package vmctl

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// renderTable writes the report as two tables, providers then nodes, and a line on the
// default. Cells hold short words; every reason and message is printed in full as a numbered
// note under its table, so one long reason cannot widen every row past the terminal.
func renderTable(w io.Writer, r report) error {
	n := &notes{index: map[string]int{}}
	var rows [][]string
	if len(r.Providers) > 0 {
		rows = append(rows, []string{"NAME", "HANDLER", "DEFAULT", "ENABLED", "AVAILABLE", "READY", "VERSIONS", "EMULATION"})
	}
	for _, p := range r.Providers {
		enabled := "yes"
		if !p.Enabled {
			enabled = n.ref("no", p.Name, "disabled", p.DisabledReason)
		}
		rows = append(rows, []string{p.Name, p.Handler, yesDash(p.Default), enabled,
			n.ref(p.Available, p.Name, "", p.Message), fmt.Sprintf("%d/%d", p.ReadyNodes, p.TotalNodes),
			orDash(strings.Join(p.Versions, ",")), allowed(p.AllowEmulation)})
	}
	section(w, "PROVIDERS", "(no ProviderClass; is virtpod installed?)", rows, n)

	rows = nil
	if len(r.Nodes) > 0 {
		head := []string{"NAME", "KVM", "EMULATION"}
		for _, name := range providerNames(r) {
			head = append(head, strings.ToUpper(name))
		}
		rows = append(rows, append(head, "HEARTBEAT"))
	}
	for _, node := range r.Nodes {
		row := []string{node.Name, n.ref(node.KVM, node.Name, "kvm", node.KVMReason), emulation(node, n)}
		for _, name := range providerNames(r) {
			row = append(row, providerCell(node, name, n))
		}
		hb := node.HeartbeatAge
		if node.Stale {
			hb += " (stale)"
		}
		rows = append(rows, append(row, hb))
	}
	section(w, "NODES", "(no HypervisorNode; is the virtpod-agent DaemonSet running?)", rows, n)

	var err error
	switch {
	case r.DefaultProvider == "":
		_, err = fmt.Fprintln(w, "default provider: none")
	case r.DefaultAvailable:
		_, err = fmt.Fprintf(w, "default provider: %s (available)\n", r.DefaultProvider)
	default:
		_, err = fmt.Fprintf(w, "default provider: %s (NOT available)\n", r.DefaultProvider)
	}
	return err
}

// section writes a title, its rows aligned in columns (or empty when there are none), the notes
// the rows refer to, and a blank line.
func section(w io.Writer, title, empty string, rows [][]string, n *notes) {
	fmt.Fprintln(w, title)
	if len(rows) == 0 {
		fmt.Fprintln(w, "  "+empty)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush()
	n.write(w)
	fmt.Fprintln(w)
}

// notes numbers the reasons the tables refer to: one note per distinct reason, naming the rows
// that share it, so fifty nodes without cloud-hypervisor make one note, not fifty. Numbers run
// on across tables, so each [n] on the screen is unique.
type notes struct {
	list    []note
	index   map[string]int // what + text → position in list
	written int            // notes already written under an earlier table
}

type note struct {
	what, text string
	subjects   []string
}

// ref returns cell followed by the number of the note that says text about subject, or cell
// alone when there is nothing to say. what names the column when the cell alone does not.
func (n *notes) ref(cell, subject, what, text string) string {
	text = oneLine(text) // a tab or newline in a reason would break the columns
	if text == "" {
		return cell
	}
	key := what + "\x00" + text
	i, ok := n.index[key]
	if !ok {
		i = len(n.list)
		n.index[key] = i
		n.list = append(n.list, note{what: what, text: text})
	}
	if s := n.list[i].subjects; len(s) == 0 || s[len(s)-1] != subject {
		n.list[i].subjects = append(s, subject)
	}
	return fmt.Sprintf("%s [%d]", cell, i+1)
}

// maxSubjects is how many rows a note names before it only counts the rest.
const maxSubjects = 3

// write prints the notes added since the last write, one a line: "[2] node-a, node-c: kvm: ...".
func (n *notes) write(w io.Writer) {
	for i := n.written; i < len(n.list); i++ {
		nt := n.list[i]
		who := strings.Join(nt.subjects, ", ")
		if len(nt.subjects) > maxSubjects {
			who = fmt.Sprintf("%s and %d more", strings.Join(nt.subjects[:maxSubjects], ", "), len(nt.subjects)-maxSubjects)
		}
		if nt.what != "" {
			who += ": " + nt.what
		}
		fmt.Fprintf(w, "[%d] %s: %s\n", i+1, who, nt.text)
	}
	n.written = len(n.list)
}

// providerNames are the node columns: every hypervisor a node reported or a class names, so a
// class whose handler no node carries still shows as a column of reasons.
func providerNames(r report) []string {
	seen := map[string]bool{}
	for _, p := range r.Providers {
		seen[p.Handler] = true
	}
	for _, n := range r.Nodes {
		for _, p := range n.Providers {
			seen[p.Name] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func providerCell(node nodeRow, name string, n *notes) string {
	for _, p := range node.Providers {
		if p.Name != name {
			continue
		}
		if p.Available {
			return orDash(p.Version)
		}
		return n.ref("missing", node.Name, name, p.Reason)
	}
	return "not reported"
}

func emulation(node nodeRow, n *notes) string {
	if node.Emulation {
		return "yes"
	}
	return n.ref("no", node.Name, "emulation", node.EmulationReason)
}

func yesDash(b bool) string {
	if b {
		return "yes"
	}
	return "-"
}

func allowed(b bool) string {
	if b {
		return "allowed"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
