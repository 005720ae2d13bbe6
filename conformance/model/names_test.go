package model

import (
	"errors"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/policy"
)

// TestNamesAndTimes: D50 (the times the guard holds) and D52 (approver names) in the model: approver and kill switch
// names, and the times a request may carry.
func TestNamesAndTimes(t *testing.T) {
	m := newModel(t, policy.Policy{Budget: 10, Tools: map[string]policy.ToolRule{"wire": {Cost: 1, RequiresApproval: true}}})
	m.SetName("Payments Bot")
	if _, err := m.Request(lineage.Request{ID: "w", Tool: "wire", At: at(1)}); err != nil {
		t.Fatal(err)
	}
	for _, by := range []string{"", " alice", "alice\t", "al\u200bice", "al\u2028ice", "\u115falice", "PAYMENTS BOT", "payments bot"} {
		if _, err := m.Approve("w", by, at(2)); !errors.Is(err, lineage.ErrBadApprover) {
			t.Errorf("approve by %q: %v, want bad_approver", by, err)
		}
		if err := m.Terminate(by, at(2)); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("terminate by %q: %v, want bad_request", by, err)
		}
	}
	for _, when := range []time.Time{time.Unix(-1, 0), time.Date(2262, 4, 12, 0, 0, 0, 0, time.UTC), time.Date(2318, 1, 1, 0, 0, 0, 0, time.UTC)} {
		if _, err := m.Request(lineage.Request{Tool: "wire", At: when}); !errors.Is(err, lineage.ErrBadRequest) {
			t.Errorf("request at %s: %v, want bad_request", when, err)
		}
	}
	if v, err := m.Request(lineage.Request{Tool: "wire", At: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)}); err != nil || v.Decision != lineage.Pending {
		t.Errorf("request in 2200: %+v, %v", v, err)
	}
}
