package mcpproxy_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/mcpproxy"
	"github.com/lineage-guard/lineage/server"
	"github.com/lineage-guard/lineage/server/servertest"
)

// TestTooManyRequestsIsSlowDown: a call the service refuses 429 (the agent's
// request quota) is answered as a refusal the model can act on, "slow down",
// and never forwarded. Pins D264 (a 429 is "slow down").
func TestTooManyRequestsIsSlowDown(t *testing.T) {
	// 0.1 a second: a Retry-After of 10 s, over the client's MaxRetryAfter
	// (5 s), so the proxy gets the 429 at once.
	st := servertest.Start(t, servertest.WithConfig(func(cfg *server.Config) { cfg.AgentRPS, cfg.AgentBurst = 0.1, 6 }))
	svc := &service{t: t, url: st.URL, hs: st.HTTP}
	svc.admin = svc.client(st.AdminToken)
	svc.approver = svc.client(st.ApproverToken)
	_, tok := svc.agent(`{"budget": 100, "tools": {"echo": {"cost": 0}}}`)
	log := filepath.Join(t.TempDir(), "upstream.log")
	h := svc.connect(t, tok, testUpstream(t, "Echoes its text.", log), proxyOpts{})
	refused := 0
	for i := 0; i < 10 && refused == 0; i++ {
		res := h.call(t, "echo", map[string]any{"text": "x"})
		if !res.IsError {
			continue
		}
		if refusalOf(res) != mcpproxy.ReasonTooManyRequests || !strings.Contains(text(res), "Slow down") {
			t.Fatalf("call %d: refusal %q: %s", i, refusalOf(res), text(res))
		}
		refused++
	}
	if refused == 0 {
		t.Fatal("no call was refused too_many_requests")
	}
	for _, l := range lines(t, log) {
		if l != "x" {
			t.Fatalf("the upstream got %q", l)
		}
	}
}

// TestRejectionNoteReachesTheModel: the note a person gives with a rejection
// is in the text the model reads. Pins D265 (the note of an approval).
func TestRejectionNoteReachesTheModel(t *testing.T) {
	svc := startService(t)
	agent, tok := svc.agent(`{"budget": 10, "tools": {"echo": {"cost": 1, "requires_approval": true}}}`)
	log := filepath.Join(t.TempDir(), "upstream.log")
	h := svc.connect(t, tok, testUpstream(t, "Echoes its text.", log), proxyOpts{wait: 30 * time.Second})
	done := h.callAsync(t, "echo", map[string]any{"text": "x"})
	id := svc.pendingOf(t, agent, nil)
	if _, err := svc.approver.RejectWithNote(context.Background(), agent, id, "ask for the staging copy instead"); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res == nil {
		t.Fatal("no result")
	}
	if v := verdictOf(t, res); v.Reason != "approval_rejected" || !strings.Contains(text(res), `the approver's note: "ask for the staging copy instead"`) {
		t.Fatalf("rejected call: %+v %q", v, text(res))
	}
	if got := lines(t, log); len(got) != 0 {
		t.Fatalf("a rejected call was forwarded: %v", got)
	}
}
