package nodes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/api"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/internal/storeclock"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/postgres"
	"github.com/lineage-guard/lineage/runtime/store/postgres/pgtest"
	"github.com/lineage-guard/lineage/server"
)

// syncBuf is a log both the node and the test use.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// skewedNode is one in-process node whose own clock runs skew off the real
// time (through the runtime's clock option: faketime does not reach a Go
// binary's clock), taking its time from the store's clock (useStore) or
// from its own skewed clock (the code before one clock).
type skewedNode struct {
	url   string
	admin *client.Client
	clock *storeclock.Clock
	log   *syncBuf
}

func startSkewedNode(t *testing.T, db string, skew, maxErr time.Duration, useStore bool, key []byte, principals []server.Entry, adminTok string) *skewedNode {
	t.Helper()
	st, err := postgres.Open(context.Background(), db, postgres.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	local := func() time.Time { return time.Now().Add(skew) }
	logs := &syncBuf{}
	read, done := st.ClockSource()
	clk := storeclock.Start(read, storeclock.Options{Local: local, MaxError: maxErr, Every: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	now := clk.Now
	if !useStore {
		now = local
	}
	rt := runtime.Open(st, runtime.Options{
		Clock: now,
	})
	srv, err := server.New(server.Config{Runtime: rt, Principals: principals, Key: key, News: st, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer(ln.Addr().String())
	go hs.Serve(ln)
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Close()
		_ = hs.Shutdown(ctx)
		clk.Close()
		done()
		_ = st.Close()
	})
	u := "http://" + ln.Addr().String()
	admin, err := client.New(u, adminTok, hc)
	if err != nil {
		t.Fatal(err)
	}
	return &skewedNode{url: u, admin: admin, clock: clk, log: logs}
}

// skewedCluster starts one node per skew on one database.
func skewedCluster(t *testing.T, skews []time.Duration, maxErr time.Duration, useStore bool) []*skewedNode {
	t.Helper()
	db := pgtest.URL(t)
	key, tok := server.NewKey(), server.NewToken()
	principals := []server.Entry{{Name: "root", Role: server.RoleAdmin, TokenSHA256: server.TokenSHA256(tok)}}
	var nodes []*skewedNode
	for _, s := range skews {
		nodes = append(nodes, startSkewedNode(t, db, s, maxErr, useStore, key, principals, tok))
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		synced := 0
		for _, n := range nodes {
			if n.clock.Unsynced() == nil {
				synced++
			}
		}
		if synced == len(nodes) || maxErr < time.Microsecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d nodes synced their clocks with the store's in 10 s", synced, len(nodes))
		}
	}
	return nodes
}

// skewTrial: on a fresh agent with rate_limit {max_actions: 5, window_secs:
// 10}, 6 requests on node a, then 6 on node b at once: how many were allowed
// within that real second.
func skewTrial(t *testing.T, ctx context.Context, a, b *skewedNode) int {
	t.Helper()
	cr, err := a.admin.CreateAgent(ctx, json.RawMessage(`{"budget": 1000, "rate_limit": {"max_actions": 5, "window_secs": 10}, "tools": {"t": {"cost": 1}}}`), "bot", "")
	if err != nil {
		t.Fatal(err)
	}
	allowed := 0
	for i, n := range []*skewedNode{a, a, a, a, a, a, b, b, b, b, b, b} {
		v, err := n.admin.Request(ctx, cr.Agent, lineage.Request{ID: fmt.Sprint("r", i), Tool: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if v.Decision == lineage.Allow {
			allowed++
		}
	}
	return allowed
}

var trialSkews = []time.Duration{0, 5 * time.Second, -5 * time.Second, 24 * time.Hour, -24 * time.Hour}

// trialPairs: (first node, second node) by index into trialSkews: behind
// then ahead, the true clock then a day ahead, a day behind then a day ahead.
var trialPairs = [][2]int{{2, 1}, {0, 3}, {4, 3}, {3, 4}, {1, 0}}

// TestNodesOneClock: nodes whose own clocks run 5 s and a day ahead and
// behind decide on the store's clock (docs/stores.md, "One clock"; D354 (the store's clock is every node's)
// (the store's clock is every node's)): a rate limit holds in real time
// across them, no agent's time freezes, and every record's time is the real
// time within the bound.
func TestNodesOneClock(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and five servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const bound = 100 * time.Millisecond
	nodes := skewedCluster(t, trialSkews, bound, true)
	for i, n := range nodes {
		off, e := n.clock.Offset()
		t.Logf("node %d: own clock %+v, measured offset %s ± %s", i, trialSkews[i], off.Round(time.Microsecond), e)
	}
	// The rate limit in real time.
	for _, p := range trialPairs {
		if got := skewTrial(t, ctx, nodes[p[0]], nodes[p[1]]); got != 5 {
			t.Errorf("node clock %+v then %+v: %d allowed within a second of a 5-per-10s limit", trialSkews[p[0]], trialSkews[p[1]], got)
		} else {
			t.Logf("node clock %+v then %+v: 5 allowed of 12 (limit 5 per 10 s)", trialSkews[p[0]], trialSkews[p[1]])
		}
	}
	// No freeze, real times: one request on the node a day ahead, then one
	// every 20 ms on the others; each record's time is when it was made.
	cr, err := nodes[0].admin.CreateAgent(ctx, json.RawMessage(`{"budget": 1000, "tools": {"t": {"cost": 1}}}`), "bot", "")
	if err != nil {
		t.Fatal(err)
	}
	type window struct{ from, to time.Time }
	made := map[uint64]window{}
	order := []int{3, 0, 1, 2, 4, 0, 1, 2, 4, 0, 1, 2, 4, 3, 0}
	for i, n := range order {
		from := time.Now()
		v, err := nodes[n].admin.Request(ctx, cr.Agent, lineage.Request{ID: fmt.Sprint("f", i), Tool: "t"})
		if err != nil || v.Decision != lineage.Allow {
			t.Fatalf("request %d on node %d: %+v, %v", i, n, v, err)
		}
		made[v.Seq] = window{from, time.Now()}
		time.Sleep(20 * time.Millisecond)
	}
	data, err := nodes[0].admin.Log(ctx, cr.Agent, 2)
	if err != nil {
		t.Fatal(err)
	}
	var last time.Time
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var rec lineage.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		w, ok := made[rec.Seq]
		if !ok {
			continue
		}
		if !rec.At.Time.After(last) {
			t.Errorf("record %d at %s, not after the one before (%s): the agent's time froze", rec.Seq, rec.At.Time, last)
		}
		last = rec.At.Time
		if rec.At.Time.Before(w.from.Add(-bound)) || rec.At.Time.After(w.to.Add(bound)) {
			t.Errorf("record %d at %s, made in real time %s…%s (bound %s)", rec.Seq, rec.At.Time.UTC(), w.from.UTC(), w.to.UTC(), bound)
		}
	}
}

// TestNodesOwnClocks is the skew trial on the nodes' own clocks, as before
// one clock: it shows what TestNodesOneClock prevents (a limit of 5 per
// 10 s exceeded within a real second) and that the trial can fail.
func TestNodesOwnClocks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and five servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodes := skewedCluster(t, trialSkews, 100*time.Millisecond, false)
	over := 0
	for _, p := range trialPairs {
		got := skewTrial(t, ctx, nodes[p[0]], nodes[p[1]])
		t.Logf("own clocks %+v then %+v: %d allowed within a second (limit 5 per 10 s)", trialSkews[p[0]], trialSkews[p[1]], got)
		if got > 5 {
			over++
		}
	}
	if over == 0 {
		t.Error("on their own clocks no trial exceeded the limit: the trial proves nothing")
	}
}

// TestNodeClockUnsynced: a node that cannot bound its clock's error within
// --max-clock-error (here 1 ns: any round trip is longer) refuses writes
// with 503 clock_unsynced, says why in /health and in its log, and still
// serves reads.
func TestNodeClockUnsynced(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and a server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := skewedCluster(t, []time.Duration{0}, time.Nanosecond, true)[0]
	_, err := n.admin.CreateAgent(ctx, json.RawMessage(`{"budget": 10}`), "bot", "")
	var ce *api.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable || ce.Code != "clock_unsynced" || !strings.Contains(ce.Message, "round trip") {
		t.Fatalf("a write on an unsynced node: %v, want 503 clock_unsynced saying why", err)
	}
	res, err := http.Get(n.url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"clock_unsynced"`) || !strings.Contains(string(body), "round trip") {
		t.Errorf("/health of an unsynced node: %d %s", res.StatusCode, body)
	}
	if _, err := n.admin.Agents(ctx); err != nil {
		t.Errorf("a read on an unsynced node: %v", err)
	}
	if log := n.log.String(); !strings.Contains(log, "clock unsynced") || !strings.Contains(log, "round trip") {
		t.Errorf("the node's log does not say its clock is unsynced: %s", log)
	}
	t.Logf("/health: %s", bytes.TrimSpace(body))
}
