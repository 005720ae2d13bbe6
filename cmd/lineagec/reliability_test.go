package main

// Reliability of `lineagec serve` under load (issue 10 item 6): 64 clients on
// the durable file store; kill -9 at random moments with restarts; SIGTERM
// under load. Each test runs a real serve process (this test binary, see
// startServe) on loopback, and then reads the data directory itself: every
// verdict a client got with 200 must be in the log, every log must verify,
// the state must be the fold of the log, budgets and max_calls exact.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/file"
)

// The load's agents: a budget of exactly loadBudget allowed cost units,
// "m" allowed exactly loadMaxCalls times, "p" held for approval.
const (
	loadBudget   = 20
	loadMaxCalls = 5
	loadClients  = 64
	loadSlots    = 16 // agents in use at once: 4 clients share each
)

var loadPolicy = json.RawMessage(fmt.Sprintf(`{"budget": %d, "scar_limit": 1000000,
  "tools": {"t": {"cost": 1}, "r": {"cost": 0}, "m": {"cost": 0, "max_calls": %d},
            "p": {"cost": 1, "requires_approval": true}}}`, loadBudget, loadMaxCalls))

// ack is one verdict a client received with 200: of a request (approval
// false) or of an approval.
type ack struct {
	agent    string
	id       string
	approval bool
	v        lineage.Verdict
}

// loadRig is the agents, the acknowledged verdicts and the unacknowledged
// requests of a load, across the server's restarts (the data directory,
// admin.token and server.key stay).
type loadRig struct {
	t     *testing.T
	data  string
	admin string // the admin token

	mu      sync.Mutex
	url     string
	hc      *http.Client
	tokens  map[string]string // agent id → token
	slots   []string          // the agent each slot uses now
	slotMu  []sync.Mutex      // held while a slot's next agent is made
	acks    []ack
	unacked []ack // requests sent and never answered 200 (v is empty)
	checked int   // unacked[:checked] were checked after a restart
	seq     int
}

func newLoadRig(t *testing.T, data string) *loadRig {
	return &loadRig{t: t, data: data, tokens: map[string]string{}, slots: make([]string, loadSlots), slotMu: make([]sync.Mutex, loadSlots)}
}

// attach points the rig at a (re)started server.
func (g *loadRig) attach(url string) {
	tok, err := os.ReadFile(filepath.Join(g.data, "admin.token"))
	if err != nil {
		g.t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.admin, g.url = strings.TrimSpace(string(tok)), url
	g.hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: loadClients, IdleConnTimeout: 30 * time.Second}}
}

func (g *loadRig) client(token string) *client.Client {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, err := client.New(g.url, token, g.hc)
	if err != nil {
		g.t.Fatal(err)
	}
	c.Retries = 0 // a retry would hide which attempt was answered
	return c
}

// agent returns the slot's agent, creating one if the slot has none or its
// agent is the (terminated) one given as done.
func (g *loadRig) agent(ctx context.Context, slot int, done string) (string, *client.Client, error) {
	g.slotMu[slot].Lock()
	defer g.slotMu[slot].Unlock()
	g.mu.Lock()
	cur := g.slots[slot]
	g.mu.Unlock()
	if cur == "" || cur == done {
		created, err := g.client(g.admin).CreateAgent(ctx, loadPolicy, fmt.Sprintf("slot-%d", slot), "")
		if err != nil {
			return "", nil, err
		}
		g.mu.Lock()
		g.tokens[created.Agent] = created.Token
		g.slots[slot], cur = created.Agent, created.Agent
		g.mu.Unlock()
	}
	g.mu.Lock()
	tok := g.tokens[cur]
	g.mu.Unlock()
	return cur, g.client(tok), nil
}

func (g *loadRig) record(a ack, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ok {
		g.acks = append(g.acks, a)
	} else {
		g.unacked = append(g.unacked, a)
	}
}

func (g *loadRig) answered() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.acks)
}

func (g *loadRig) nextID(w int) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq++
	return fmt.Sprintf("c%d-%d", w, g.seq)
}

// run drives loadClients clients until stop is closed. With tolerant, a
// failed call ends that client (the server went away: the call was never
// acknowledged); without, it is a test failure.
func (g *loadRig) run(stop <-chan struct{}, tolerant bool) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := 0; w < loadClients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			slot, done := w%loadSlots, ""
			fail := func(what string, err error) {
				if !tolerant {
					g.t.Errorf("client %d: %s: %v", w, what, err)
				}
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				agent, c, err := g.agent(ctx, slot, done)
				if err != nil {
					fail("creating an agent", err)
					return
				}
				tool := [...]string{"t", "t", "r", "r", "m", "p"}[r.IntN(6)]
				req := ack{agent: agent, id: g.nextID(w)}
				v, err := c.Request(ctx, agent, lineage.Request{ID: req.id, Tool: tool})
				if err != nil {
					g.record(req, false)
					fail("request", err)
					return
				}
				req.v = v
				g.record(req, true)
				if v.Terminated != "" || v.Reason == "terminated" {
					done = agent
					continue
				}
				if v.Decision != lineage.Pending {
					continue
				}
				ap := ack{agent: agent, id: req.id, approval: true}
				if r.IntN(2) == 0 {
					v, err = g.client(g.admin).Approve(ctx, agent, req.id)
				} else {
					v, err = g.client(g.admin).Reject(ctx, agent, req.id)
				}
				if errors.Is(err, lineage.ErrNotPending) || errors.Is(err, lineage.ErrSealed) {
					continue // the agent was terminated meanwhile: its pending requests are void
				}
				if err != nil {
					g.record(ap, false)
					fail("approval", err)
					return
				}
				ap.v = v
				g.record(ap, true)
				if v.Terminated != "" {
					done = agent
				}
			}
		}(w)
	}
	wg.Wait()
}

// check reads the data directory (the server stopped) and checks every
// acknowledged verdict against the logs, every log's verification, and the
// state as the fold of the log, budgets and max_calls exact; each problem
// is a test error. It returns the records by agent.
func (g *loadRig) check() map[string][]lineage.Record {
	g.t.Helper()
	logs, problems := g.problems()
	for _, p := range problems {
		g.t.Error(p)
	}
	return logs
}

// problems is check's work: the records by agent and what is wrong.
func (g *loadRig) problems() (map[string][]lineage.Record, []string) {
	t := g.t
	t.Helper()
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	st, err := file.Open(g.data, file.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("the data directory does not open: %v", err)
	}
	defer st.Close()
	// Every agent has the same policy: compile it once (a compile is ~50 ms).
	compiled := map[string]*policy.Compiled{}
	rt := runtime.Open(st, runtime.Options{Compile: func(doc []byte) (*policy.Compiled, error) {
		if c, ok := compiled[string(doc)]; ok {
			return c, nil
		}
		c, err := compiler.Compile("", doc)
		if err == nil {
			compiled[string(doc)] = c
		}
		return c, err
	}})
	ids, err := rt.Agents()
	if err != nil {
		t.Fatal(err)
	}
	logs := map[string][]lineage.Record{}
	for _, id := range ids {
		recs, err := rt.Records(id)
		if err != nil {
			bad("agent %s: the log does not verify: %v", id, err)
			continue
		}
		logs[id] = recs
		s, err := rt.State(context.Background(), id)
		if err != nil {
			bad("agent %s: the state does not open: %v", id, err)
			continue
		}
		checkFold(bad, id, recs, s)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, a := range g.acks {
		recs, ok := logs[a.agent]
		if a.v.Reason == "terminated" && !a.approval {
			// deny terminated: nothing appended (docs/decision-order.md step 2), and the log is sealed
			if !ok || recs[len(recs)-1].Kind != lineage.KindTermination {
				bad("agent %s: %s was denied terminated, but the log is not sealed", a.agent, a.id)
			}
			continue
		}
		if !ok || a.v.Seq >= uint64(len(recs)) {
			bad("agent %s: the verdict of %s (seq %d) was answered 200 but is not in the log", a.agent, a.id, a.v.Seq)
			continue
		}
		rec := recs[a.v.Seq]
		var got lineage.Verdict
		var gotID string
		switch {
		case a.approval && rec.Kind == lineage.KindApproval:
			var b lineage.ApprovalBody
			_ = json.Unmarshal(rec.Body, &b)
			got, gotID = b.Verdict, b.RequestID
		case !a.approval && rec.Kind == lineage.KindAction:
			var b lineage.ActionBody
			_ = json.Unmarshal(rec.Body, &b)
			got, gotID = b.Verdict, b.Request.ID
		default:
			bad("agent %s: the verdict of %s (approval %v) was answered at seq %d, a %s record", a.agent, a.id, a.approval, a.v.Seq, rec.Kind)
			continue
		}
		if gotID != a.id || got.Decision != a.v.Decision || got.Reason != a.v.Reason || got.Cost != a.v.Cost || got.Terminated != a.v.Terminated {
			bad("agent %s seq %d: answered %s %+v, logged %s %+v", a.agent, a.v.Seq, a.id, a.v, gotID, got)
		}
	}
	return logs, problems
}

// checkFold: the state the runtime replays is the fold of the log, the budget
// held exactly and max_calls exactly.
func checkFold(bad func(string, ...any), id string, recs []lineage.Record, s lineage.State) {
	var spent int64
	calls := map[string]int64{}
	tools := map[string]string{} // request id → tool
	deniedMax := false
	sealed := lineage.Termination("")
	for _, rec := range recs {
		switch rec.Kind {
		case lineage.KindAction:
			var b lineage.ActionBody
			if err := json.Unmarshal(rec.Body, &b); err != nil {
				bad("agent %s seq %d: %v", id, rec.Seq, err)
				return
			}
			tools[b.Request.ID] = b.Request.Tool
			if b.Verdict.Decision == lineage.Allow {
				spent += b.Verdict.Cost
				calls[b.Request.Tool]++
			}
			if b.Verdict.Reason == "max_calls_exceeded" {
				deniedMax = true
			}
		case lineage.KindApproval:
			var b lineage.ApprovalBody
			if err := json.Unmarshal(rec.Body, &b); err != nil {
				bad("agent %s seq %d: %v", id, rec.Seq, err)
				return
			}
			if b.Verdict.Decision == lineage.Allow {
				spent += b.Verdict.Cost
				calls[tools[b.RequestID]]++
			}
		case lineage.KindTermination:
			var b lineage.TerminationBody
			_ = json.Unmarshal(rec.Body, &b)
			sealed = b.Reason
		}
	}
	if s.Seq != uint64(len(recs)-1) || s.Spent != spent || s.Termination != sealed {
		bad("agent %s: state seq %d spent %d termination %q; the log: %d records, spent %d, termination %q",
			id, s.Seq, s.Spent, s.Termination, len(recs), spent, sealed)
	}
	for tool, n := range calls {
		if s.Calls[tool] != n {
			bad("agent %s: state calls[%s] = %d, the log allowed %d", id, tool, s.Calls[tool], n)
		}
	}
	if spent > loadBudget || (sealed == lineage.BudgetExhausted) != (spent == loadBudget) {
		bad("agent %s: spent %d of a budget of %d, termination %q", id, spent, loadBudget, sealed)
	}
	if calls["m"] > loadMaxCalls || (deniedMax && calls["m"] != loadMaxCalls) {
		bad("agent %s: m allowed %d times (max_calls %d, a max_calls denial: %v)", id, calls["m"], loadMaxCalls, deniedMax)
	}
}

func loadDuration(long, short time.Duration) time.Duration {
	if testing.Short() {
		return short
	}
	return long
}

// TestServeLoad: 64 clients for 30 s (-short: 3 s) on the file store; then
// SIGTERM, and every 200 verdict is in the log, every log verifies, the state
// is the fold of the log, budgets and max_calls held exactly.
func TestServeLoad(t *testing.T) {
	data := t.TempDir()
	cmd, url, stderr, wait := startServe(t, data)
	g := newLoadRig(t, data)
	g.attach(url)
	stop := make(chan struct{})
	time.AfterFunc(loadDuration(30*time.Second, 3*time.Second), func() { close(stop) })
	t0 := time.Now()
	g.run(stop, false)
	t1 := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, stderr())
	}
	t2 := time.Now()
	logs := g.check()
	t.Logf("load %s, SIGTERM to exit %s, checks %s", t1.Sub(t0), t2.Sub(t1), time.Since(t2))
	sealed := 0
	for _, recs := range logs {
		if recs[len(recs)-1].Kind == lineage.KindTermination {
			sealed++
		}
	}
	t.Logf("%d verdicts answered, %d agents, %d ran out of budget", len(g.acks), len(logs), sealed)
	// The checks can fail: a verdict the log does not have, and one it has
	// otherwise, are both found.
	var kept ack
	for _, a := range g.acks {
		if a.v.Reason != "terminated" {
			kept = a
		}
	}
	g.acks = append(g.acks, ack{agent: kept.agent, id: "forged", v: lineage.Verdict{Decision: lineage.Allow, Seq: 1 << 20}})
	changed := kept
	changed.v.Cost++
	g.acks = append(g.acks, changed)
	if _, problems := g.problems(); len(problems) != 2 {
		t.Errorf("two forged verdicts, %d problems found: %q", len(problems), problems)
	}
	g.acks = g.acks[:len(g.acks)-2]
	if len(g.acks) < loadClients || (sealed == 0 && !testing.Short()) {
		t.Errorf("the load did too little: %d verdicts, %d agents sealed", len(g.acks), sealed)
	}
}

// TestServeKill9: kill -9 of serve at random moments under the load of
// TestServeLoad, then a restart on the same data directory, 20 times
// (-short: 4). After each restart every request that was never answered is
// either wholly in the log (GET of its id answers its logged verdict) or not
// at all (unknown_request); at the end every 200 verdict is in the log, every
// log verifies and the state is the fold of its log.
func TestServeKill9(t *testing.T) {
	data := t.TempDir()
	g := newLoadRig(t, data)
	trials := 20
	if testing.Short() {
		trials = 4
	}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	for trial := 0; trial < trials; trial++ {
		cmd, url, stderr, wait := startServe(t, data)
		g.attach(url)
		if trial > 0 {
			g.checkUnacked(stderr)
		}
		stop := make(chan struct{})
		loaded := make(chan struct{})
		before := g.answered()
		go func() { g.run(stop, true); close(loaded) }()
		// Kill at a random moment once this server answers (it may be slow, under -race).
		for deadline := time.Now().Add(30 * time.Second); g.answered() == before && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(time.Duration(r.IntN(500)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = wait()
		close(stop)
		<-loaded
	}
	cmd, url, stderr, wait := startServe(t, data)
	g.attach(url)
	g.checkUnacked(stderr)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, stderr())
	}
	g.check()
	t.Logf("%d trials, %d verdicts answered, %d requests never answered", trials, len(g.acks), len(g.unacked))
	if len(g.acks) == 0 {
		t.Error("no verdict was answered")
	}
}

// checkUnacked asks the restarted server for each request that was never
// answered: it is logged whole or not at all, and verifies the log of each agent that had one.
func (g *loadRig) checkUnacked(stderr func() string) {
	ctx := context.Background()
	g.mu.Lock()
	unacked := append([]ack(nil), g.unacked[g.checked:]...)
	g.checked = len(g.unacked)
	g.mu.Unlock()
	// The agents that had a call in flight at the kill (the end check reads all).
	agents := map[string]bool{}
	for _, u := range unacked {
		agents[u.agent] = true
	}
	admin := g.client(g.admin)
	for a := range agents {
		if res, err := admin.Verify(ctx, a); err != nil || !res.OK {
			g.t.Errorf("after kill -9, agent %s does not verify: %+v %v\n%s", a, res, err, stderr())
		}
	}
	for _, u := range unacked {
		if u.approval {
			continue // its request id exists either way
		}
		_, err := admin.Verdict(ctx, u.agent, u.id, 0)
		if err != nil && !errors.Is(err, lineage.ErrUnknownRequest) {
			g.t.Errorf("after kill -9, request %s of %s: %v", u.id, u.agent, err)
		}
	}
}

// TestServeSIGTERMLoad: SIGTERM under the load of 64 clients: serve exits 0,
// and every request in flight was either answered 200 and is in the log, or
// never acknowledged; the logs verify and fold.
func TestServeSIGTERMLoad(t *testing.T) {
	data := t.TempDir()
	cmd, url, stderr, wait := startServe(t, data)
	g := newLoadRig(t, data)
	g.attach(url)
	stop := make(chan struct{})
	loaded := make(chan struct{})
	go func() { g.run(stop, true); close(loaded) }()
	for deadline := time.Now().Add(30 * time.Second); g.answered() < 4*loadClients && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := wait()
	close(stop)
	<-loaded
	if err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, stderr())
	}
	g.check()
	t.Logf("%d verdicts answered, %d requests never answered", len(g.acks), len(g.unacked))
	if len(g.acks) == 0 {
		t.Error("no verdict was answered before SIGTERM")
	}
}
