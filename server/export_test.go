package server_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/runtime/store/file"
	"github.com/lineage-guard/lineage/server"
	"github.com/lineage-guard/lineage/server/servertest"
)

// eventSink is a decision-log sink that keeps the events by decision_id.
type eventSink struct {
	mu  sync.Mutex
	got map[string]map[string]any
	*httptest.Server
}

func newEventSink(t *testing.T) *eventSink {
	s := &eventSink{got: map[string]map[string]any{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			t.Errorf("sink: %v", err)
			return
		}
		var batch []map[string]any
		if err := json.NewDecoder(zr).Decode(&batch); err != nil {
			t.Errorf("sink: %v", err)
			return
		}
		s.mu.Lock()
		for _, ev := range batch {
			s.got[fmt.Sprint(ev["decision_id"])] = ev
		}
		s.mu.Unlock()
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *eventSink) waitFor(t *testing.T, ids ...string) map[string]map[string]any {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s.mu.Lock()
		n := 0
		for _, id := range ids {
			if s.got[id] != nil {
				n++
			}
		}
		if n == len(ids) || time.Now().After(deadline) {
			out := map[string]map[string]any{}
			for k, v := range s.got {
				out[k] = v
			}
			s.mu.Unlock()
			if n != len(ids) {
				t.Fatalf("the sink has %d of %v: %v", n, ids, out)
			}
			return out
		}
		s.mu.Unlock()
	}
}

// TestDecisionLogApprovals: an approval is exported as its own event (input
// approval, result the approved verdict), the genesis and policy records are
// not; a server started with another sink sends that sink every verdict from
// the logs' start (D346 (a new sink gets every verdict)), the cursor being
// the first sink's.
func TestDecisionLogApprovals(t *testing.T) {
	dir := t.TempDir()
	st, err := file.Open(dir, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	first := newEventSink(t)
	svc := servertest.Start(t, servertest.WithStore(st), servertest.WithConfig(func(c *server.Config) {
		c.DecisionLog = server.DecisionLogConfig{URL: first.URL, Store: st, Dir: dir}
	}))
	t.Cleanup(svc.Server.Close)
	ctx := context.Background()
	admin, _ := client.New(svc.URL, svc.AdminToken, nil)
	created, err := admin.CreateAgent(ctx, json.RawMessage(`{"budget": 100, "tools": {"t": {"cost": 1}, "wire": {"cost": 2, "requires_approval": true}}}`), "", "")
	if err != nil {
		t.Fatal(err)
	}
	bot, _ := client.New(svc.URL, created.Token, nil)
	a := created.Agent
	v1, err := bot.Request(ctx, a, lineage.Request{Tool: "t"})
	if err != nil {
		t.Fatal(err)
	}
	v2, err := bot.Request(ctx, a, lineage.Request{Tool: "wire"})
	if err != nil || v2.Decision != lineage.Pending {
		t.Fatalf("wire: %+v %v", v2, err)
	}
	approver, _ := client.New(svc.URL, svc.ApproverToken, nil)
	v3, err := approver.Approve(ctx, a, v2.RequestID)
	if err != nil {
		t.Fatal(err)
	}
	id := func(seq uint64) string { return fmt.Sprintf("%s:%d", a, seq) }
	got := first.waitFor(t, id(v1.Seq), id(v2.Seq), id(v3.Seq))
	if len(got) != 3 || got[id(0)] != nil || got[id(1)] != nil {
		t.Errorf("events %v: want the two actions and the approval only", got)
	}
	ap := got[id(v3.Seq)]
	input, _ := ap["input"].(map[string]any)
	approval, _ := input["approval"].(map[string]any)
	result, _ := ap["result"].(map[string]any)
	lin, _ := ap["lineage"].(map[string]any)
	if approval["approver"] != "alice" || approval["approved"] != true || approval["request_id"] != v2.RequestID ||
		result["decision"] != "allow" || lin["kind"] != "approval" || ap["path"] != "lineage/policy/verdict" {
		t.Errorf("the approval's event: %v", ap)
	}
	if act := got[id(v2.Seq)]; act["result"].(map[string]any)["decision"] != "pending" {
		t.Errorf("the pending action's event: %v", act)
	}
	svc.Server.Close()

	// Another sink: every verdict again, from the start.
	second := newEventSink(t)
	srv, err := server.New(server.Config{Runtime: svc.Runtime, Key: server.NewKey(),
		DecisionLog: server.DecisionLogConfig{URL: second.URL, Store: st, Dir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	second.waitFor(t, id(v1.Seq), id(v2.Seq), id(v3.Seq))
}

// TestBackupRoute: GET /v1/backup is for admins, and answers not_found
// where there is no file store to copy (PostgreSQL: pg_dump).
func TestBackupRoute(t *testing.T) {
	svc := servertest.Start(t)
	for _, c := range []struct {
		tok    string
		status int
		code   string
	}{{svc.ApproverToken, 403, "forbidden"}, {svc.AdminToken, 404, "not_found"}} {
		req, _ := http.NewRequest("GET", svc.URL+"/v1/backup", nil)
		req.Header.Set("Authorization", "Bearer "+c.tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Code, Message string }
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != c.status || e.Code != c.code {
			t.Errorf("GET /v1/backup: %d %+v, want %d %s", resp.StatusCode, e, c.status, c.code)
		}
	}
}
