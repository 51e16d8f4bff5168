// Package pinned finds image references in Kubernetes manifests that are not pinned by digest:
// what a release must never ship (tools/release) and what the local cluster must never render.
package pinned

import (
	"bytes"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Unpinned lists, in a multi-document YAML stream, every image reference not pinned by digest:
// each "image" field (containers, init containers, image volumes), a ProviderClass's runnerImage
// and each of its allowedRunnerImages, and each env value of a variable named *_IMAGE.
func Unpinned(stream []byte) []string {
	var bad []string
	for _, doc := range bytes.Split(stream, []byte("\n---\n")) {
		var obj any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			bad = append(bad, "unparsable document: "+err.Error())
			continue
		}
		walk(obj, "", &bad)
	}
	sort.Strings(bad)
	return bad
}

func walk(v any, key string, bad *[]string) {
	switch t := v.(type) {
	case map[string]any:
		if name, ok := t["name"].(string); ok && strings.HasSuffix(name, "_IMAGE") {
			if s, ok := t["value"].(string); ok && !strings.Contains(s, "@sha256:") {
				*bad = append(*bad, name+"="+s)
			}
		}
		for k, c := range t {
			walk(c, k, bad)
		}
	case []any:
		for _, c := range t {
			walk(c, key, bad)
		}
	case string:
		if (key == "image" || key == "runnerImage" || key == "allowedRunnerImages") && !strings.Contains(t, "@sha256:") {
			*bad = append(*bad, key+": "+t)
		}
	}
}
