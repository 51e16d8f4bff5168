package vm

import (
	"errors"
	"strings"
	"testing"

	vmv1 "github.com/virtpod/virtpod/apis/vm/v1alpha1"
)

// TestPodSecurityRefusalWords: a Pod Security refusal (for a level stricter than what the
// runner needs, which no built-in level is) is told as such, with the label to change.
func TestPodSecurityRefusalWords(t *testing.T) {
	e := &podRefused{podSecurity: "restricted", err: errors.New(`pods "web-virtpod" is forbidden: violates PodSecurity "restricted:v1.37": seccompProfile`)}
	c := e.cause()
	for _, want := range []string{vmv1.ReasonPodSecurityForbidden, `Pod Security level "restricted"`, "pod-security.kubernetes.io/enforce=restricted", "seccompProfile"} {
		if !strings.Contains(c.reason+" "+c.message, want) {
			t.Errorf("refusal lacks %q: %s: %s", want, c.reason, c.message)
		}
	}
}
