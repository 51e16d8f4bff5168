package churn

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// A halted VM is never stopped again nor a running one started, every action but the soak's
// own comes at its share, and each power action is a valid patch of the spec.
func TestNextAndPatch(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, halted := range []bool{false, true} {
		got := map[Action]int{}
		for range 10000 {
			got[Next(rnd, halted)]++
		}
		if halted && got[Stop] > 0 || !halted && got[Start] > 0 {
			t.Errorf("halted=%v: %v", halted, got)
		}
		for a, want := range map[Action]int{Delete: 2000, Restart: 2000, Own: 4000} {
			if got[a] < want*9/10 || got[a] > want*11/10 {
				t.Errorf("halted=%v: %q %d times in 10,000, want about %d", halted, a, got[a], want)
			}
		}
	}
	for _, a := range []Action{Start, Stop, Restart} {
		var p struct {
			Spec map[string]string `json:"spec"`
		}
		if err := json.Unmarshal([]byte(Patch(a)), &p); err != nil || len(p.Spec) != 1 {
			t.Errorf("Patch(%q) = %s: %v", a, Patch(a), err)
		}
	}
	if Patch(Delete) != "" || Patch(Own) != "" {
		t.Error("a delete or the soak's own action is no patch")
	}
}
