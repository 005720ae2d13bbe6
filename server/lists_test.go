package server_test

import (
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"testing"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/server"
	"github.com/lineage-guard/lineage/server/servertest"
)

// TestListsPaged: GET /v1/agents and /v1/pending answer pages of limit rows
// with next_cursor until the last; /v1/agents filters by status; a bad
// limit, status or cursor is 400 bad_request (docs/service.md).
func TestListsPaged(t *testing.T) {
	e := start(t)
	var ids []string
	for range 5 {
		id, ac := e.agent()
		ids = append(ids, id)
		if _, err := ac.Request(bg, id, lineage.Request{ID: "w1", Tool: "wire"}); err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(ids)
	if _, err := e.approver.Approve(bg, ids[1], "w1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.approver.Terminate(bg, ids[3], ""); err != nil {
		t.Fatal(err)
	}

	var got []string
	p := client.Page{Limit: 2}
	pages := 0
	for {
		rows, next, err := e.approver.AgentsPage(bg, p)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range rows {
			got = append(got, r.Agent)
			if r.Name != "bot" || r.Digest == "" {
				t.Errorf("row %+v", r)
			}
		}
		if next == "" {
			break
		}
		p.Cursor = next
	}
	if !slices.Equal(got, ids) || pages != 3 {
		t.Errorf("agents by 2: %q in %d pages, want %q in 3", got, pages, ids)
	}
	dead, next, err := e.approver.AgentsPage(bg, client.Page{Status: "terminated"})
	if err != nil || next != "" || len(dead) != 1 || dead[0].Agent != ids[3] || dead[0].Status != "terminated" {
		t.Errorf("terminated agents: %+v %q %v", dead, next, err)
	}

	var pend []string
	p = client.Page{Limit: 1}
	for {
		rows, next, err := e.approver.PendingPage(bg, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) > 1 {
			t.Fatalf("a page of %d rows, limit 1", len(rows))
		}
		for _, r := range rows {
			pend = append(pend, r.Agent)
			if r.Tool != "wire" || r.Cost != 2 || r.Name != "bot" || r.At.IsZero() || r.Args == nil {
				t.Errorf("pending row %+v", r)
			}
		}
		if next == "" {
			break
		}
		p.Cursor = next
	}
	if want := []string{ids[0], ids[2], ids[4]}; !slices.Equal(pend, want) {
		t.Errorf("pending: %q, want %q", pend, want)
	}
	all, err := e.approver.Pending(bg)
	if err != nil || len(all) != 3 {
		t.Errorf("Pending (every page): %d rows, %v", len(all), err)
	}

	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "cursor=%21%21", "status=asleep", "sort=id", "limit=1&limit=2"} {
		for _, path := range []string{"/v1/agents?", "/v1/pending?"} {
			status, body := e.raw("GET", path+q, e.tokens["approver"], "")
			if status != http.StatusBadRequest || body["code"] != "bad_request" {
				t.Errorf("GET %s%s: %d %v, want 400 bad_request", path, q, status, body)
			}
		}
	}
	status, body := e.raw("GET", "/v1/pending?limit=3", e.tokens["approver"], "")
	if status != http.StatusOK || body["next_cursor"] != nil {
		t.Errorf("the last page: %d next_cursor %v, want null", status, body["next_cursor"])
	}
}

// TestListsLoadNoAgent: with --max-agents 2, listing every page of agents
// and of pending requests, and reading each agent's state, leaves at most
// two agents in memory, and lineage_agents_loaded and
// lineage_pending_requests report the runtime's table (D366 (listing loads
// nothing, the metric is the runtime's)). On the old code the list opened
// every agent and the gauge counted every agent the server had touched.
func TestListsLoadNoAgent(t *testing.T) {
	e := startMax(t, 2)
	var ids []string
	for range 6 {
		id, ac := e.agent()
		ids = append(ids, id)
		if _, err := ac.Request(bg, id, lineage.Request{ID: "w1", Tool: "wire"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.metric("lineage_agents_loaded"); n > 2 {
		t.Errorf("lineage_agents_loaded %v after creating 6, want at most 2", n)
	}
	all, err := e.approver.Agents(bg)
	if err != nil || len(all) != 6 {
		t.Fatalf("Agents: %d, %v", len(all), err)
	}
	pend, err := e.approver.Pending(bg)
	if err != nil || len(pend) != 6 {
		t.Fatalf("Pending: %d, %v", len(pend), err)
	}
	for _, id := range ids {
		if _, err := e.approver.State(bg, id); err != nil {
			t.Fatal(err)
		}
	}
	loaded := e.metric("lineage_agents_loaded")
	if loaded > 2 || loaded != float64(e.svc.Runtime.Loaded()) {
		t.Errorf("lineage_agents_loaded %v, runtime holds %d: want the runtime's, at most 2", loaded, e.svc.Runtime.Loaded())
	}
	if p := e.metric("lineage_pending_requests"); p != loaded {
		t.Errorf("lineage_pending_requests %v over %v loaded agents with one pending each", p, loaded)
	}
	if e.svc.Runtime.Loaded() > 2 {
		t.Errorf("the runtime holds %d agents, --max-agents 2", e.svc.Runtime.Loaded())
	}
}

// startMax is start over a runtime that holds at most max agents.
func startMax(t *testing.T, max int) *env {
	t.Helper()
	logs := &syncBuffer{}
	svc := servertest.Start(t, servertest.WithRuntime(func(o *runtime.Options) { o.MaxAgents = max }),
		servertest.WithConfig(func(cfg *server.Config) { cfg.Logger = slog.New(slog.NewTextHandler(logs, nil)) }))
	e := &env{t: t, url: svc.URL, dir: svc.Dir, srv: svc.Server, logs: logs, store: svc.File, hs: svc.HTTP, svc: svc,
		tokens: map[string]string{"admin": svc.AdminToken, "approver": svc.ApproverToken}}
	e.admin = e.client(svc.AdminToken)
	e.approver = e.client(svc.ApproverToken)
	return e
}
