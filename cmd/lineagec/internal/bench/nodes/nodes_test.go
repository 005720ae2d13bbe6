package nodes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/api"

	"github.com/anishathalye/porcupine"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/postgres"
	"github.com/lineage-guard/lineage/runtime/store/postgres/pgtest"
	"github.com/lineage-guard/lineage/server"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	nNodes   = 3
	nClients = 64
	seed     = 12
)

// cluster is nNodes servers over one database, each with its own runtime
// and its own pool, and the admin, approver and agent clients of each.
type cluster struct {
	t        testing.TB
	urls     []string
	admin    []*client.Client
	approver []*client.Client
	adminTok string
	apprTok  string
	hc       *http.Client // shared by every client, its idle connections closed first at the end
	stores   []*postgres.Store
}

func startCluster(t testing.TB, url string, nodes int) *cluster {
	t.Helper()
	urls := make([]string, nodes)
	for i := range urls {
		urls[i] = url
	}
	return startClusterURLs(t, urls)
}

// startClusterURLs starts one node per database URL (the same database,
// maybe reached through a proxy).
func startClusterURLs(t testing.TB, dbs []string) *cluster {
	t.Helper()
	key := server.NewKey()
	c := &cluster{t: t, adminTok: server.NewToken(), apprTok: server.NewToken(),
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: nClients}}}
	principals := []server.Entry{
		{Name: "root", Role: server.RoleAdmin, TokenSHA256: server.TokenSHA256(c.adminTok)},
		{Name: "alice", Role: server.RoleApprover, TokenSHA256: server.TokenSHA256(c.apprTok)},
	}
	for _, url := range dbs {
		st, err := postgres.Open(context.Background(), url, postgres.Options{Timeout: 2 * time.Second, Committers: *benchCommitters})
		if err != nil {
			t.Fatal(err)
		}
		rt := runtime.Open(st, runtime.Options{
			MaxAgents: 100,
		})
		srv, err := server.New(server.Config{Runtime: rt, Principals: principals, Key: key, News: st})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hs := srv.HTTPServer(ln.Addr().String())
		go hs.Serve(ln)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Close()
			if err := hs.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("shutdown: %v", err)
			}
			if err := st.Close(); err != nil {
				t.Errorf("closing the store: %v", err)
			}
		})
		u := "http://" + ln.Addr().String()
		c.stores = append(c.stores, st)
		c.urls = append(c.urls, u)
		c.admin = append(c.admin, c.client(u, c.adminTok))
		c.approver = append(c.approver, c.client(u, c.apprTok))
	}
	t.Cleanup(c.hc.CloseIdleConnections) // before the servers shut down
	return c
}

func (c *cluster) client(url, token string) *client.Client {
	cl, err := client.New(url, token, c.hc)
	if err != nil {
		c.t.Fatal(err)
	}
	return cl
}

// agent creates an agent on node 0 and returns its id and one client per
// node with its token.
func (c *cluster) agent(ctx context.Context, policyJSON string) (string, []*client.Client) {
	c.t.Helper()
	cr, err := c.admin[0].CreateAgent(ctx, json.RawMessage(policyJSON), "bot", "")
	if err != nil {
		c.t.Fatal(err)
	}
	var cls []*client.Client
	for _, u := range c.urls {
		cls = append(cls, c.client(u, cr.Token))
	}
	return cr.Agent, cls
}

// logVerdicts reads an agent's log through a node, checks that it
// verifies there, and returns the current verdict of each request id and
// how many action records each id has.
func (c *cluster) logVerdicts(t *testing.T, ctx context.Context, node int, agent string) (map[string]lineage.Verdict, map[string]int) {
	t.Helper()
	if res, err := c.admin[node].Verify(ctx, agent); err != nil || !res.OK {
		t.Fatalf("node %d: verify %s: %+v, %v", node, agent, res, err)
	}
	data, err := c.admin[node].Log(ctx, agent, 0)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := runtime.VerifyLines(func(fn func(uint64, []byte) error) error {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for seq := uint64(0); sc.Scan(); seq++ {
			if err := fn(seq, sc.Bytes()); err != nil {
				return err
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatalf("node %d: offline verify of %s's log: %v", node, agent, err)
	}
	verdicts, actions := map[string]lineage.Verdict{}, map[string]int{}
	for _, rec := range recs {
		switch rec.Kind {
		case lineage.KindAction:
			var b lineage.ActionBody
			if err := json.Unmarshal(rec.Body, &b); err != nil {
				t.Fatal(err)
			}
			verdicts[b.Request.ID] = b.Verdict
			actions[b.Request.ID]++
		case lineage.KindApproval:
			var b lineage.ApprovalBody
			if err := json.Unmarshal(rec.Body, &b); err != nil {
				t.Fatal(err)
			}
			verdicts[b.RequestID] = b.Verdict
		}
	}
	return verdicts, actions
}

// got is a verdict a client received with 200 for a request id.
type got struct {
	id string
	v  lineage.Verdict
}

// sameVerdict compares what a client got with what the log holds (a
// verdict from JSON has no time; seq and request id must match).
func sameVerdict(a, b lineage.Verdict) bool {
	return a.Decision == b.Decision && a.Reason == b.Reason && a.Cost == b.Cost &&
		a.Seq == b.Seq && a.RequestID == b.RequestID && a.Terminated == b.Terminated
}

// TestNodesExact: 64 clients over 3 nodes on one database race for the last
// 20 credits, the last max_calls, one approval and one request id; the
// decisions stay exact, every log verifies on every node, and every verdict
// a client received with 200 is in the log (docs/stores.md; D135 (a database away is 503)).
func TestNodesExact(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and three servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := startCluster(t, pgtest.URL(t), nNodes)
	rng := rand.New(rand.NewPCG(seed, 0))

	// race runs 64 clients, client i on node order[i], each sending
	// per[i] requests made by mk; it returns every verdict answered 200.
	race := func(t *testing.T, agent string, cls []*client.Client, per []int, r rules, mk func(cl, i int) lineage.Request) []got {
		order := make([]int, nClients)
		for i := range order {
			order[i] = rng.IntN(nNodes)
		}
		var mu sync.Mutex
		var out []got
		h := &history{base: time.Now()}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for cl := range nClients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := range per[cl] {
					req := mk(cl, i)
					call := h.now()
					v, err := cls[order[cl]].Request(ctx, agent, req)
					if err != nil {
						t.Errorf("client %d on node %d: %s: %v", cl, order[cl], req.ID, err)
						return
					}
					mu.Lock()
					out = append(out, got{req.ID, v})
					h.add(cl, mIn{id: req.ID}, call, outOf(v, nil))
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
		if res := h.check(r); res != porcupine.Ok {
			t.Fatalf("the history of %d requests is not linearizable under the model (%s): %v", len(h.ops), res, h.ops)
		}
		return out
	}
	perClient := func(lo, hi int) []int {
		per := make([]int, nClients)
		for i := range per {
			per[i] = lo + rng.IntN(hi-lo+1)
		}
		return per
	}
	// checkInLog: every answered verdict that names a record (seq > 0; a
	// request refused because the agent is terminated is not recorded, D4 (refusals that are not recorded))
	// is the current verdict of its request in the log, read on each node.
	checkInLog := func(t *testing.T, agent string, answers []got) map[string]int {
		t.Helper()
		var actions map[string]int
		for node := range nNodes {
			var verdicts map[string]lineage.Verdict
			verdicts, actions = c.logVerdicts(t, ctx, node, agent)
			for _, a := range answers {
				if a.v.Seq == 0 {
					if a.v.Reason != "terminated" {
						t.Fatalf("%s: %+v has no seq", a.id, a.v)
					}
					continue
				}
				if lv, ok := verdicts[a.id]; !ok || !sameVerdict(lv, a.v) {
					t.Fatalf("node %d: %s answered %+v, the log holds %+v (found %v)", node, a.id, a.v, lv, ok)
				}
			}
		}
		return actions
	}

	t.Run("credits", func(t *testing.T) {
		agent, cls := c.agent(ctx, `{"budget": 20, "tools": {"t": {"cost": 1}}}`)
		answers := race(t, agent, cls, perClient(1, 3), rules{budget: 20, cost: 1}, func(cl, i int) lineage.Request {
			return lineage.Request{ID: fmt.Sprintf("c%d_%d", cl, i), Tool: "t"}
		})
		allowed := 0
		for _, a := range answers {
			if a.v.Decision == lineage.Allow {
				allowed++
			} else if a.v.Reason != "insufficient_budget" && a.v.Reason != "terminated" {
				t.Fatalf("%s: %+v, want allow, insufficient_budget or terminated (budget_exhausted)", a.id, a.v)
			}
		}
		if allowed != 20 {
			t.Fatalf("%d of %d requests allowed, want exactly 20 (the budget)", allowed, len(answers))
		}
		checkInLog(t, agent, answers)
		for node := range nNodes {
			st, err := c.admin[node].State(ctx, agent)
			if err != nil || st.Spent != 20 {
				t.Fatalf("node %d: spent %d, %v; want 20", node, st.Spent, err)
			}
		}
	})
	t.Run("max_calls", func(t *testing.T) {
		agent, cls := c.agent(ctx, `{"budget": 1000, "scar_limit": 1000, "tools": {"m": {"cost": 1, "max_calls": 17}}}`)
		answers := race(t, agent, cls, perClient(0, 2), rules{budget: 1000, cost: 1, maxCalls: 17}, func(cl, i int) lineage.Request {
			return lineage.Request{ID: fmt.Sprintf("m%d_%d", cl, i), Tool: "m"}
		})
		allowed := 0
		for _, a := range answers {
			if a.v.Decision == lineage.Allow {
				allowed++
			} else if a.v.Reason != "max_calls_exceeded" {
				t.Fatalf("%s: %+v, want allow or max_calls_exceeded", a.id, a.v)
			}
		}
		if len(answers) <= 17 || allowed != 17 {
			t.Fatalf("%d of %d requests allowed, want exactly 17 (max_calls) of more", allowed, len(answers))
		}
		checkInLog(t, agent, answers)
	})
	t.Run("one_request_id", func(t *testing.T) {
		agent, cls := c.agent(ctx, `{"budget": 5, "tools": {"t": {"cost": 1}}}`)
		answers := race(t, agent, cls, perClient(1, 1), rules{budget: 5, cost: 1, retryID: "same"}, func(int, int) lineage.Request {
			return lineage.Request{ID: "same", Tool: "t", Args: map[string]any{"n": 1}}
		})
		for _, a := range answers {
			if !sameVerdict(a.v, answers[0].v) {
				t.Fatalf("request id \"same\" answered %+v and %+v", a.v, answers[0].v)
			}
		}
		if n := checkInLog(t, agent, answers)["same"]; n != 1 {
			t.Fatalf("%d records of request \"same\", want 1", n)
		}
	})
	t.Run("one_approval", func(t *testing.T) {
		agent, cls := c.agent(ctx, `{"budget": 10, "tools": {"pay": {"cost": 5, "requires_approval": true}}}`)
		v, err := cls[0].Request(ctx, agent, lineage.Request{ID: "p", Tool: "pay"})
		if err != nil || v.Decision != lineage.Pending {
			t.Fatalf("pay: %+v, %v; want pending", v, err)
		}
		var mu sync.Mutex
		wins, notPending := 0, 0
		var won lineage.Verdict
		var wg sync.WaitGroup
		start := make(chan struct{})
		r := rules{budget: 10, cost: 5, approval: true}
		h := &history{base: time.Now()}
		h.add(0, mIn{id: "p"}, 0, outOf(v, nil)) // the request, before every approval
		for cl := range nClients {
			node := rng.IntN(nNodes)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				call := h.now()
				v, err := c.approver[node].Approve(ctx, agent, "p")
				mu.Lock()
				defer mu.Unlock()
				h.add(cl, mIn{approve: true, id: "p"}, call, outOf(v, err))
				switch {
				case err == nil:
					wins++
					won = v
				case errors.Is(err, lineage.ErrNotPending):
					notPending++
				default:
					t.Errorf("client %d on node %d: approve: %v", cl, node, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if res := h.check(r); res != porcupine.Ok {
			t.Fatalf("the history of the approvals is not linearizable under the model (%s): %v", res, h.ops)
		}
		if wins != 1 || notPending != nClients-1 {
			t.Fatalf("%d approvals won, %d not_pending; want 1 and %d", wins, notPending, nClients-1)
		}
		checkInLog(t, agent, []got{{"p", won}})
		for node := range nNodes {
			st, err := c.admin[node].State(ctx, agent)
			if err != nil || st.Spent != 5 || len(st.Pending) != 0 {
				t.Fatalf("node %d: spent %d, %d pending, %v; want 5 spent, none pending", node, st.Spent, len(st.Pending), err)
			}
		}
	})
}

// TestNodeOutage: while the database is down a node answers 503
// unavailable and records nothing; once it is back the node goes on without
// a restart, and the other node sees what it wrote (docs/stores.md; D135 (a database away is 503)).
func TestNodeOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pg := pgtest.Start(t)
	c := startCluster(t, pg.NewDatabase(t), 2)
	agent, cls := c.agent(ctx, `{"budget": 10, "tools": {"t": {"cost": 1}}}`)
	if v, err := cls[0].Request(ctx, agent, lineage.Request{Tool: "t"}); err != nil || v.Seq != 2 {
		t.Fatalf("before the outage: %+v, %v", v, err)
	}
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err := cls[0].Request(ctx, agent, lineage.Request{Tool: "t"}) // no id: not retried
	var e *api.Error
	if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable || e.Code != "unavailable" {
		t.Fatalf("request while the database is down: %v, want 503 unavailable", err)
	}
	if _, err := c.admin[1].State(ctx, agent); !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable {
		t.Fatalf("read while the database is down: %v, want 503 unavailable", err)
	}
	if err := pg.Restart(); err != nil {
		t.Fatal(err)
	}
	v, err := cls[0].Request(ctx, agent, lineage.Request{ID: "after", Tool: "t"})
	if err != nil || v.Seq != 3 || v.Decision != lineage.Allow {
		t.Fatalf("after the outage: %+v, %v; want allow at seq 3 (nothing recorded while down)", v, err)
	}
	for node := range 2 {
		st, err := c.admin[node].State(ctx, agent)
		if err != nil || st.Seq != 3 || st.Spent != 2 {
			t.Fatalf("node %d after the outage: seq %d spent %d, %v; want 3 and 2", node, st.Seq, st.Spent, err)
		}
	}
	c.logVerdicts(t, ctx, 1, agent)
}
