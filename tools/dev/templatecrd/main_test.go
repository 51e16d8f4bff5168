package main

import (
	"strings"
	"testing"
)

func TestStrip(t *testing.T) {
	in := `---
spec:
  versions:
  - schema:
      openAPIV3Schema:
        properties:
          acceleration:
            type: string
            x-kubernetes-validations:
            - message: spec.acceleration is immutable
              rule: self == oldSelf
          guest:
            x-kubernetes-validations:
            - message: memory stays
              rule: has(self.maxMemory) || self.memory == oldSelf.memory
            - message: cpus at least 1
              rule: self.cpus >= 1
`
	out, n, err := strip([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("removed %d rules, want 2", n)
	}
	got := string(out)
	if strings.Contains(got, "oldSelf") || !strings.Contains(got, "rule: self.cpus >= 1") || !strings.HasPrefix(got, "---\n") {
		t.Errorf("stripped CRD:\n%s", got)
	}
	if strings.Count(got, "x-kubernetes-validations") != 1 {
		t.Errorf("an emptied rule list is left behind:\n%s", got)
	}
}
