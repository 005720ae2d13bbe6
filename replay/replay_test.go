package replay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/policy/policytest"
	"github.com/lineage-guard/lineage/replay"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/memory"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

var genesis = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// randomLog drives a runtime with random acts (the errors among them are
// not recorded, as in production) and returns the log. The policies are
// policytest.Random's; the acts aim at what replay must get right: assigned
// and caller ids, approvals of ids that may not be pending, kills,
// terminations by budget and scars, rate windows at exact edges.
func randomLog(t testing.TB, r *rand.Rand, rt *runtime.Runtime, c *policy.Compiled, n int) []lineage.Record {
	t.Helper()
	ctx := context.Background()
	agent, err := rt.CreateAgent(ctx, c, runtime.CreateOptions{At: genesis, Name: "r"})
	if err != nil {
		t.Fatal(err)
	}
	now := genesis
	var ids []string
	for i := 0; i < n; i++ {
		if r.IntN(3) > 0 {
			now = now.Add(time.Duration(r.IntN(2000)) * time.Millisecond)
		} else {
			now = now.Add(time.Duration(r.IntN(3)) * time.Second)
		}
		switch x := r.IntN(100); {
		case x < 60:
			req := lineage.Request{Tool: policytest.Tools[r.IntN(len(policytest.Tools))], At: now}
			if r.IntN(2) == 0 {
				req.ID = fmt.Sprintf("c%d", i)
			}
			if r.IntN(3) > 0 {
				req.Args = map[string]any{"amount": json.Number(fmt.Sprint(r.IntN(10)))}
			}
			v, err := rt.Request(ctx, agent, req)
			if err == nil && v.Decision == lineage.Pending {
				ids = append(ids, v.RequestID)
			}
		case x < 97:
			id := fmt.Sprintf("req_%d", 2+r.IntN(i+2))
			if len(ids) > 0 && r.IntN(4) > 0 {
				id = ids[r.IntN(len(ids))]
			}
			ap := runtime.Approval{RequestID: id, By: "alice", At: now}
			if x < 86 {
				_, _ = rt.Approve(ctx, agent, ap)
			} else {
				_, _ = rt.Reject(ctx, agent, ap)
			}
		default:
			_, _ = rt.Terminate(ctx, agent, runtime.Kill{By: "ops", Note: "random", At: now})
		}
	}
	recs, err := rt.Records(agent)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestReplayUnderItsOwnPolicyReproducesTheLog: a random log replayed under
// the policy it was written under gives every recorded verdict again, and the
// very same log (the replayed head equals the recorded head).
func TestReplayUnderItsOwnPolicyReproducesTheLog(t *testing.T) {
	ctx := context.Background()
	policies, logs := 100, 8
	if testing.Short() {
		policies = 25
	}
	kinds := map[lineage.Kind]int{}
	for seed := uint64(0); seed < uint64(policies); seed++ {
		r := rand.New(rand.NewPCG(seed, 14))
		c, err := compiler.CompilePolicy(policytest.Random(r))
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		rp := replay.New(c)
		agents := 0 // each log is another agent of one runtime (one prepared query per policy)
		rt := runtime.Open(memory.New(), runtime.Options{NewAgentID: func() string { agents++; return fmt.Sprintf("agt_r%d", agents) }})
		for l := 0; l < logs; l++ {
			recs := randomLog(t, r, rt, c, 5+r.IntN(40))
			for _, rec := range recs {
				kinds[rec.Kind]++
			}
			rep, err := rp.Run(ctx, recs, replay.Options{All: true, Head: true})
			if err != nil {
				t.Fatalf("seed %d log %d: %v", seed, l, err)
			}
			// Without the head nothing is hashed, and nothing else changes.
			fast, err := rp.Run(ctx, recs, replay.Options{All: true})
			if err != nil {
				t.Fatalf("seed %d log %d: %v", seed, l, err)
			}
			if fast.Head != "" || !reflect.DeepEqual(fast.Events, rep.Events) || !reflect.DeepEqual(fast.Summary, rep.Summary) {
				t.Fatalf("seed %d log %d: without the head %+v, with %+v", seed, l, fast, rep)
			}
			for _, ev := range rep.Events {
				if ev.Differ {
					t.Fatalf("seed %d log %d: seq %d %s differs: recorded %+v replayed %+v (%s)", seed, l, ev.Seq, ev.Kind, ev.Recorded, ev.Replayed, ev.Note)
				}
				if ev.Recorded != nil && (ev.Replayed == nil || !reflect.DeepEqual(*ev.Recorded, *ev.Replayed)) {
					t.Fatalf("seed %d log %d: seq %d: recorded %+v, replayed %+v", seed, l, ev.Seq, ev.Recorded, ev.Replayed)
				}
			}
			if rep.Summary.Differ != 0 || rep.Summary.DifferentActs != 0 || rep.Head != rep.RecordedHead {
				t.Fatalf("seed %d log %d: %+v", seed, l, rep)
			}
		}
	}
	t.Logf("records by kind: %v", kinds)
	// The generator must reach every kind of record, or the property says
	// little: 50 of each over the 800 logs (112 approvals, the rarest), 10
	// over the 200 logs of -short (13 approvals since policytest.Random is
	// the one generator).
	least := 50
	if testing.Short() {
		least = 10
	}
	for _, k := range []lineage.Kind{lineage.KindAction, lineage.KindApproval, lineage.KindTermination} {
		if kinds[k] < least {
			t.Errorf("only %d %s records over all logs", kinds[k], k)
		}
	}
}

func compile(t testing.TB, yaml string) *policy.Compiled {
	t.Helper()
	c, err := compiler.Compile("policy.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// examplePolicy is the invoice example's policy (examples/invoice).
func examplePolicy(t testing.TB) *policy.Compiled {
	t.Helper()
	c, err := compiler.CompileFile("../examples/invoice/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func invoiceLog(t testing.TB) []lineage.Record {
	t.Helper()
	ctx := context.Background()
	rt := runtime.Open(memory.New(), runtime.Options{})
	agent, err := rt.CreateAgent(ctx, examplePolicy(t), runtime.CreateOptions{At: genesis})
	if err != nil {
		t.Fatal(err)
	}
	at := func(s int) time.Time { return genesis.Add(time.Duration(s) * time.Second) }
	must := func(v lineage.Verdict, err error) lineage.Verdict {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	must(rt.Request(ctx, agent, lineage.Request{Tool: "read_invoice", At: at(1)}))             // allow
	must(rt.Request(ctx, agent, lineage.Request{Tool: "llm_turn", At: at(2)}))                 // allow
	must(rt.Request(ctx, agent, lineage.Request{Tool: "pay_invoice", At: at(3)}))              // pending req_4
	must(rt.Approve(ctx, agent, runtime.Approval{RequestID: "req_4", By: "alice", At: at(4)})) // allow
	must(rt.Request(ctx, agent, lineage.Request{ID: "p2", Tool: "pay_invoice", At: at(5)}))    // pending
	must(rt.Reject(ctx, agent, runtime.Approval{RequestID: "p2", By: "bob", At: at(6)}))       // deny
	must(rt.Request(ctx, agent, lineage.Request{Tool: "run_shell", At: at(7)}))                // deny, scar
	must(rt.Request(ctx, agent, lineage.Request{Tool: "read_invoice", At: at(8)}))             // allow
	if _, err := rt.Terminate(ctx, agent, runtime.Kill{By: "ops", At: at(9)}); err != nil {
		t.Fatal(err)
	}
	recs, err := rt.Records(agent)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestStricterPolicyShowsTheDifferences(t *testing.T) {
	// No llm_turn, payments without approval but capped by a CEL constraint
	// that fails without an amount, and run_shell allowed: two allowed requests
	// are denied, one denied is allowed, and p2 (rejected) is denied for
	// another reason.
	stricter := `
budget: 25000
tools:
  read_invoice: { cost: 0 }
  pay_invoice: { cost: 1, when: [{ expr: "has(args.amount)", reason: no_amount, scar: minor }] }
  run_shell: { cost: 0 }
`
	rep, err := replay.Run(context.Background(), invoiceLog(t), compile(t, stricter), replay.Options{Head: true})
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Summary
	if s.Requests != 6 || s.AllowedToDenied != 2 || s.DeniedToAllowed != 1 || s.Differ != 4 || s.DifferentActs != 6 {
		t.Fatalf("summary %+v", s)
	}
	want := []struct {
		seq    uint64
		kind   string
		reason string
		note   bool
	}{
		{3, "request", "unlisted_tool", false}, // llm_turn
		{4, "request", "no_amount", false},     // pay_invoice: denied at once
		{5, "approve", "", true},               // ... so its approval is not pending
		{6, "request", "no_amount", false},     // p2 (its rejection was a deny too: same outcome... but the act differs)
		{7, "reject", "", true},
		{8, "request", "ok", false}, // run_shell now allowed
	}
	if len(rep.Events) != len(want) {
		t.Fatalf("events %+v", rep.Events)
	}
	for i, w := range want {
		ev := rep.Events[i]
		if ev.Seq != w.seq || ev.Kind != w.kind || (ev.Note != "") != w.note || !ev.Differ ||
			(w.reason != "" && (ev.Replayed == nil || ev.Replayed.Reason != w.reason)) {
			t.Errorf("event %d: %+v, want %+v", i, ev, w)
		}
	}
	if rep.Head == "" || rep.Head == rep.RecordedHead {
		t.Fatal("a different policy wrote the same log")
	}
}

// TestAssignedIdsFollowTheReplay: an approval refused under the new policy
// appends nothing there, so later assigned ids move by one; the approval of a
// later request must follow its new id.
func TestAssignedIdsFollowTheReplay(t *testing.T) {
	ctx := context.Background()
	rt := runtime.Open(memory.New(), runtime.Options{})
	agent, err := rt.CreateAgent(ctx, compile(t, "budget: 10\ntools: {read: {cost: 0, requires_approval: true}, pay: {cost: 1, requires_approval: true}}\n"),
		runtime.CreateOptions{At: genesis})
	if err != nil {
		t.Fatal(err)
	}
	for i, tool := range []string{"read", "pay"} {
		at := genesis.Add(time.Duration(i+1) * time.Second)
		v, err := rt.Request(ctx, agent, lineage.Request{Tool: tool, At: at})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rt.Approve(ctx, agent, runtime.Approval{RequestID: v.RequestID, By: "alice", At: at}); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := rt.Records(agent)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := replay.Run(ctx, recs, compile(t, "budget: 10\ntools: {read: {cost: 0}, pay: {cost: 1, requires_approval: true}}\n"), replay.Options{All: true})
	if err != nil {
		t.Fatal(err)
	}
	last := rep.Events[len(rep.Events)-1]
	if last.RequestID != "req_4" || last.Replayed == nil || last.Replayed.Decision != lineage.Allow || last.Replayed.RequestID != "req_3" {
		t.Fatalf("approval of req_4 (req_3 in the replay): %+v", last)
	}
	if rep.Summary.Differ != 0 || rep.Summary.DifferentActs != 2 { // read: pending → allow at once, and its approval refused
		t.Fatalf("summary %+v", rep.Summary)
	}
}

func TestReplayRefusesWhatIsNotALog(t *testing.T) {
	ctx := context.Background()
	recs := invoiceLog(t)
	if _, err := replay.Run(ctx, recs[1:], examplePolicy(t), replay.Options{}); !errors.Is(err, replay.ErrBadLog) {
		t.Fatalf("a log without genesis: %v", err)
	}
	// A long log (records decoded in batches ahead of the replay) that goes
	// bad early, in the body or in its order, and late.
	rt := runtime.Open(memory.New(), runtime.Options{})
	agent, err := rt.CreateAgent(ctx, examplePolicy(t), runtime.CreateOptions{At: genesis})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		if _, err := rt.Request(ctx, agent, lineage.Request{Tool: "read_invoice", At: genesis.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	long, err := rt.Records(agent)
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []int{3, 700, len(long) - 1} {
		for _, damage := range []func(*lineage.Record){
			func(r *lineage.Record) { r.Body = []byte(`{"request":`) },
			func(r *lineage.Record) { r.Kind = lineage.KindGenesis },
		} {
			bad := append([]lineage.Record(nil), long...)
			damage(&bad[seq])
			_, err := replay.Run(ctx, bad, examplePolicy(t), replay.Options{})
			if !errors.Is(err, replay.ErrBadLog) || !strings.Contains(err.Error(), fmt.Sprintf("seq %d:", seq)) {
				t.Errorf("damage at seq %d: %v", seq, err)
			}
		}
	}
}

// benchLog is a 20,000-request invoice log (reads, model turns, payments
// approved: 25,000 acts) and a policy that differs from the recorded one.
//
// It also returns how fast the runtime itself wrote that log (the same
// requests and approvals, through Request and Approve): the machine's speed
// at the moment, to compare replay with.
func benchLog(b *testing.B) ([]lineage.Record, *policy.Compiled, float64) {
	ctx := context.Background()
	rt := runtime.Open(memory.New(), runtime.Options{})
	recorded := compile(b, `
budget: 1000000
tools:
  llm_turn: { cost: 0 }
  read_invoice: { cost: 0 }
  pay_invoice: { cost: 1, requires_approval: true }
`)
	agent, err := rt.CreateAgent(ctx, recorded, runtime.CreateOptions{At: genesis})
	if err != nil {
		b.Fatal(err)
	}
	at := genesis
	start := time.Now()
	for i := 0; i < benchRequests; i++ {
		at = at.Add(time.Second)
		tool := []string{"read_invoice", "llm_turn", "read_invoice", "pay_invoice"}[i%4]
		v, err := rt.Request(ctx, agent, lineage.Request{Tool: tool, Args: map[string]any{"invoice": fmt.Sprintf("INV-%d", i)}, At: at})
		if err != nil {
			b.Fatal(err)
		}
		if v.Decision == lineage.Pending {
			if _, err := rt.Approve(ctx, agent, runtime.Approval{RequestID: v.RequestID, By: "alice", At: at}); err != nil {
				b.Fatal(err)
			}
		}
	}
	runtimeRate := benchRequests / time.Since(start).Seconds()
	recs, err := rt.Records(agent)
	if err != nil {
		b.Fatal(err)
	}
	return recs, compile(b, `
budget: 1000000
rate_limit: { max_actions: 1000, window_secs: 60 }
tools:
  llm_turn: { cost: 0, max_calls: 2000 }
  read_invoice: { cost: 0 }
  pay_invoice: { cost: 2, requires_approval: true, max_calls: 4000 }
`), runtimeRate
}

const (
	benchRequests = 20000
	benchActs     = benchRequests + benchRequests/4 // and the payments' approvals
)

func replayOnce(b *testing.B, rp *replay.Replayer, recs []lineage.Record) {
	rep, err := rp.Run(context.Background(), recs, replay.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if rep.Summary.Requests != benchRequests || rep.Summary.Differ == 0 {
		b.Fatalf("summary %+v", rep.Summary)
	}
}

// reportRates reports requests/s and acts/s of benchLog's log replayed b.N
// times, and requests/cpu-s: requests per second of the CPU time the
// process used since cpu (every thread: decoding, GC).
func reportRates(b *testing.B, cpu time.Duration) {
	n := float64(b.N)
	b.ReportMetric(benchRequests*n/b.Elapsed().Seconds(), "requests/s")
	b.ReportMetric(benchActs*n/b.Elapsed().Seconds(), "acts/s")
	if used := cpuTime() - cpu; used > 0 {
		b.ReportMetric(benchRequests*n/used.Seconds(), "requests/cpu-s")
	}
}

// BenchmarkReplay replays one log on one goroutine (what lineagec replay
// does); it reports replayed requests per second.
func BenchmarkReplay(b *testing.B) {
	recs, c, runtimeRate := benchLog(b)
	rp := replay.New(c)
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		replayOnce(b, rp, recs)
	}
	reportRates(b, cpu)
	b.ReportMetric(runtimeRate, "runtime_requests/s")
}

// BenchmarkReplayParallel replays logs on GOMAXPROCS goroutines, one
// Replayer each (shadow mode over a store's agents).
func BenchmarkReplayParallel(b *testing.B) {
	recs, c, runtimeRate := benchLog(b)
	b.ResetTimer()
	cpu := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		rp := replay.New(c)
		for pb.Next() {
			replayOnce(b, rp, recs)
		}
	})
	reportRates(b, cpu)
	b.ReportMetric(runtimeRate, "runtime_requests/s")
}

// BenchmarkReplayOPAFloor is the ceiling of a replay of benchLog's log: the
// new policy's query evaluated alone (prepared and evaluated as the runtime
// does, runtime.PrepareQuery and runtime.EvalOptions) on the very inputs the
// replay builds (runtime.Options.OnDecision), with no log, no state and no
// decoding. It reports requests/s as BenchmarkReplay does.
func BenchmarkReplayOPAFloor(b *testing.B) {
	ctx := context.Background()
	recs, c, _ := benchLog(b)
	var inputs []ast.Value
	rt := runtime.Open(memory.New(), runtime.Options{OnDecision: func(_ string, in ast.Value) { inputs = append(inputs, in) }})
	agent, err := rt.CreateAgent(ctx, c, runtime.CreateOptions{At: genesis})
	if err != nil {
		b.Fatal(err)
	}
	for _, rec := range recs[2:] {
		var body struct {
			Request   lineage.RecordedRequest `json:"request"`
			RequestID string                  `json:"request_id"`
		}
		if err := json.Unmarshal(rec.Body, &body); err != nil {
			b.Fatal(err)
		}
		switch rec.Kind {
		case lineage.KindAction:
			_, err = rt.Request(ctx, agent, lineage.Request{Tool: body.Request.Tool, Args: body.Request.Args, At: rec.At.Time})
		case lineage.KindApproval:
			_, err = rt.Approve(ctx, agent, runtime.Approval{RequestID: body.RequestID, By: "alice", At: rec.At.Time})
		}
		if err != nil && !errors.Is(err, lineage.ErrSealed) && !errors.Is(err, lineage.ErrNotPending) {
			b.Fatal(err)
		}
	}
	b.Logf("%d evaluations", len(inputs))
	pq, err := runtime.PrepareQuery(ctx, c, c.Query)
	if err != nil {
		b.Fatal(err)
	}
	opts := runtime.EvalOptions(c)
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		for _, in := range inputs {
			var o [4]rego.EvalOption
			if rs, err := pq.Eval(ctx, append(append(o[:0], opts...), rego.EvalParsedInput(in))...); err != nil || len(rs) != 1 {
				b.Fatal(err)
			}
		}
	}
	reportRates(b, cpu)
}

// TestRunAllIsRunOnEachLog: replaying several logs at once (one per core, on
// one Replayer) gives each log's report as Run gives it alone, in order, and
// a bad log's error names it.
func TestRunAllIsRunOnEachLog(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 14))
	c, err := compiler.CompilePolicy(policytest.Random(r))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	rt := runtime.Open(memory.New(), runtime.Options{NewAgentID: func() string { n++; return fmt.Sprintf("agt_all%d", n) }})
	var logs [][]lineage.Record
	for range 6 {
		logs = append(logs, randomLog(t, r, rt, c, 40))
	}
	rp := replay.New(examplePolicy(t))
	o := replay.Options{All: true, Head: true}
	got, err := rp.RunAll(ctx, logs, o)
	if err != nil {
		t.Fatal(err)
	}
	for i, recs := range logs {
		want, err := rp.Run(ctx, recs, o)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Fatalf("log %d: RunAll %+v, Run %+v", i, got[i], want)
		}
	}
	logs[2] = logs[2][1:]
	if _, err := rp.RunAll(ctx, logs, o); !errors.Is(err, replay.ErrBadLog) || !strings.HasPrefix(err.Error(), "log 2: ") {
		t.Fatalf("a bad third log: %v", err)
	}
}
