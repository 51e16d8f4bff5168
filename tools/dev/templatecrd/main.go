// Command templatecrd removes the transition rules (CEL rules that read oldSelf) from a
// template kind's CRD, in place, after controller-gen wrote it.
//
// A VirtPodMachineTemplate embeds a VirtualMachine's spec, and with it the rules that keep a
// VM's acceleration, disk size or (without a maximum) memory from changing. In a template they
// break ClusterClass: Cluster API's topology controller finds out whether a template changed by a
// server-side-apply dry run of the new spec onto the old object, and rotates to a new template
// when it did, so that dry run must be admitted. A template is kept immutable instead by
// config/capi/admission's policy, which lets the topology controller's dry runs through.
package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: templatecrd CRD.yaml...")
		os.Exit(2)
	}
	for _, path := range os.Args[1:] {
		if err := rewrite(path); err != nil {
			fmt.Fprintln(os.Stderr, "templatecrd:", err)
			os.Exit(1)
		}
	}
}

func rewrite(path string) error {
	in, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, n, err := strip(in)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: no transition rule found; is this still the template kind's CRD?", path)
	}
	return os.WriteFile(path, out, 0o644)
}

// strip returns the CRD without its transition rules, and how many it removed.
func strip(in []byte) ([]byte, int, error) {
	var crd map[string]any
	if err := yaml.Unmarshal(bytes.TrimPrefix(in, []byte("---\n")), &crd); err != nil {
		return nil, 0, err
	}
	n := dropTransitionRules(crd)
	out, err := yaml.Marshal(crd)
	if err != nil {
		return nil, 0, err
	}
	return append([]byte("---\n"), out...), n, nil
}

// dropTransitionRules walks a decoded schema and removes every x-kubernetes-validations entry
// whose rule reads oldSelf, and the list when it ends up empty.
func dropTransitionRules(node any) int {
	n := 0
	switch v := node.(type) {
	case map[string]any:
		if rules, ok := v["x-kubernetes-validations"].([]any); ok {
			kept := rules[:0:0]
			for _, r := range rules {
				if m, ok := r.(map[string]any); ok && strings.Contains(fmt.Sprint(m["rule"]), "oldSelf") {
					n++
					continue
				}
				kept = append(kept, r)
			}
			if len(kept) == 0 {
				delete(v, "x-kubernetes-validations")
			} else {
				v["x-kubernetes-validations"] = kept
			}
		}
		for _, child := range v {
			n += dropTransitionRules(child)
		}
	case []any:
		for _, child := range v {
			n += dropTransitionRules(child)
		}
	}
	return n
}
