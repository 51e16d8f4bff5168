package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// RenderTable writes the report as two tables, providers then nodes, and a line on the
// default. Reasons are printed in full: they are the point of the screen.
func RenderTable(w io.Writer, r Report) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDERS")
	if len(r.Providers) == 0 {
		fmt.Fprintln(tw, "  (no ProviderClass; is virtpod installed?)")
	} else {
		fmt.Fprintln(tw, "NAME\tHANDLER\tDEFAULT\tENABLED\tAVAILABLE\tREADY\tVERSIONS\tEMULATION\tMESSAGE")
		for _, p := range r.Providers {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n",
				p.Name, p.Handler, yesDash(p.Default), enabled(p), p.Available,
				p.ReadyNodes, p.TotalNodes, orDash(strings.Join(p.Versions, ",")),
				allowed(p.AllowEmulation), oneLine(p.Message))
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "NODES")
	if len(r.Nodes) == 0 {
		fmt.Fprintln(tw, "  (no HypervisorNode; is the virtpod-agent DaemonSet running?)")
	} else {
		names := providerNames(r)
		head := []string{"NAME", "KVM", "EMULATION"}
		for _, n := range names {
			head = append(head, strings.ToUpper(n))
		}
		fmt.Fprintln(tw, strings.Join(append(head, "HEARTBEAT"), "\t"))
		for _, n := range r.Nodes {
			cols := []string{n.Name, withReason(n.KVM, n.KVMReason), emulation(n)}
			for _, name := range names {
				cols = append(cols, nodeProvider(n, name))
			}
			hb := n.HeartbeatAge
			if n.Stale {
				hb += " (stale)"
			}
			fmt.Fprintln(tw, strings.Join(append(cols, hb), "\t"))
		}
	}
	fmt.Fprintln(tw)
	switch {
	case r.DefaultProvider == "":
		fmt.Fprintln(tw, "default provider: none")
	case r.DefaultAvailable:
		fmt.Fprintf(tw, "default provider: %s (available)\n", r.DefaultProvider)
	default:
		fmt.Fprintf(tw, "default provider: %s (NOT available)\n", r.DefaultProvider)
	}
	return tw.Flush()
}

// providerNames are the node columns: every hypervisor a node reported or a class names, so a
// class whose handler no node carries still shows as a column of reasons.
func providerNames(r Report) []string {
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

func nodeProvider(n NodeRow, name string) string {
	for _, p := range n.Providers {
		if p.Name != name {
			continue
		}
		if p.Available {
			return orDash(p.Version)
		}
		return withReason("missing", p.Reason)
	}
	return "not reported"
}

func enabled(p ProviderRow) string {
	if p.Enabled {
		return "yes"
	}
	return withReason("no", p.DisabledReason)
}

func emulation(n NodeRow) string {
	if n.Emulation {
		return "yes"
	}
	return withReason("no", n.EmulationReason)
}

func withReason(s, reason string) string {
	if reason == "" {
		return s
	}
	return s + " (" + oneLine(reason) + ")" // a tab or newline in a reason would break the columns
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
