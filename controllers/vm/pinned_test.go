package vm

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPinnedBy: an unschedulable runner pod's claim tied to one node is named with that node,
// and a lost node says the guest waits for it rather than start without its data.
func TestPinnedBy(t *testing.T) {
	node := func(name string, ready corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
	}
	nodes := map[string]*corev1.Node{"node-a": node("node-a", corev1.ConditionTrue), "node-b": node("node-b", corev1.ConditionUnknown)}
	claim := func(at string) *corev1.PersistentVolumeClaim {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "web-root"}}
		if at != "" {
			c.Annotations = map[string]string{annSelectedNode: at}
		}
		return c
	}
	for _, tc := range []struct {
		at   string
		want []string // all in the message; none: no message
	}{
		{"", nil},
		{"node-a", []string{"claim web-root's volume is on node node-a", "can only run there"}},
		{"node-b", []string{"claim web-root's volume is on node node-b, which is not ready", "starts there once the node is back", "new claim"}},
		{"node-c", []string{"claim web-root's volume is on node node-c, which was deleted", "new claim"}},
	} {
		got := pinnedBy(claim(tc.at), nodes)
		if (got == "") != (tc.want == nil) {
			t.Errorf("selected node %q: %q", tc.at, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("selected node %q: %q lacks %q", tc.at, got, w)
			}
		}
	}
}
