package runtime_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
)

// TestApproverNames: an approver (and whoever pulls the kill switch) is a
// name a person can read and that is not the agent's (docs/approvals.md, D52 (approver names)).
func TestApproverNames(t *testing.T) {
	st := newMem()
	rt := runtime.Open(st, opts("names"))
	c := mustCompileYAML(t, `
budget: 10
tools: {wire: {cost: 1, requires_approval: true}}
`)
	agent := mustCreate(t, rt, c, runtime.CreateOptions{Name: "Payments Bot", At: t0})
	mustRequest(t, rt, agent, lineage.Request{ID: "w1", Tool: "wire", At: sec(1)})
	n := len(storeLines(t, st, agent))
	bad := []string{
		"", " alice", "alice ", "\talice", "alice\n", "alice\u00a0", "\u3000alice",
		"al\x00ice", "al\u200bice", "al\u200dice", "al\u00adice", "al\u2028ice", "al\u2029ice", "al\ufeffice",
		"al\u034fice", "al\ufe0fice", "\u115falice", "al\u2066ice", "al\x7fice", "al\xffice",
		strings.ToUpper(agent), "payments bot", "PAYMENTS BOT", "Payments Bot", agent,
		strings.Repeat("a", runtime.MaxActorBytes+1),
	}
	for _, by := range bad {
		for name, call := range map[string]func() error{
			"approve": func() error {
				_, err := rt.Approve(bg, agent, runtime.Approval{RequestID: "w1", By: by, At: sec(2)})
				return err
			},
			"reject": func() error {
				_, err := rt.Reject(bg, agent, runtime.Approval{RequestID: "w1", By: by, At: sec(2)})
				return err
			},
			"terminate": func() error {
				_, err := rt.Terminate(bg, agent, runtime.Kill{By: by, At: sec(2)})
				return err
			},
		} {
			if err := call(); !errors.Is(err, lineage.ErrBadApprover) {
				t.Errorf("%s by %q: %v; want bad_approver", name, by, err)
			}
		}
	}
	if got := len(storeLines(t, st, agent)); got != n {
		t.Fatalf("%d records after refused approvals, want %d", got, n)
	}
	for i, by := range []string{"alice", "Alice Smith", "ops-bot@example.com", "Zoë", "山田 太郎", "Payments Bot 2"} {
		id := "w" + string(rune('a'+i))
		mustRequest(t, rt, agent, lineage.Request{ID: id, Tool: "wire", At: sec(3)})
		if _, err := rt.Reject(bg, agent, runtime.Approval{RequestID: id, By: by, At: sec(3)}); err != nil {
			t.Errorf("reject by %q: %v", by, err)
		}
	}
}
