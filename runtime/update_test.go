package runtime_test

import (
	"bytes"
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

const nodesPolicy = `
budget: 20
tools:
  t: {cost: 1}
  pay: {cost: 5, requires_approval: true}
`

// nodes opens n runtimes over one shared store, as n guard nodes over one
// database (docs/stores.md).
func nodes(n int, st store.Store) []*runtime.Runtime {
	rts := []*runtime.Runtime{runtime.Open(st, opts("nodes"))}
	for range n - 1 {
		rts = append(rts, runtime.Open(st, reopenOpts()))
	}
	return rts
}

// TestNodesCatchUp: a node whose append loses its seq catches up and decides
// again; a retry, an approval and a read on a node that is behind answer
// from every record the other node wrote (D130 (a lost seq), D131 (answers without a record are confirmed)).
func TestNodesCatchUp(t *testing.T) {
	rt := nodes(2, memory.NewShared())
	a, b := rt[0], rt[1]
	id := mustCreate(t, a, mustCompileYAML(t, nodesPolicy), runtime.CreateOptions{})
	if v := mustRequest(t, b, id, lineage.Request{ID: "r1", Tool: "t", At: sec(1)}); v.Seq != 2 {
		t.Fatalf("b: r1 at seq %d, want 2", v.Seq)
	}
	// a is behind (it knows seq 1): its append at seq 2 loses, it catches up.
	v2 := mustRequest(t, a, id, lineage.Request{ID: "r2", Tool: "t", At: sec(2)})
	if v2.Decision != lineage.Allow || v2.Seq != 3 {
		t.Fatalf("a: r2 = %+v, want allow at seq 3", v2)
	}
	// b is behind: a retry of r2 answers a's verdict and records nothing.
	if v := mustRequest(t, b, id, lineage.Request{ID: "r2", Tool: "t", At: sec(3)}); v != v2 {
		t.Fatalf("b: retry of r2 = %+v, want a's %+v", v, v2)
	}
	// A read on a node that is behind reflects the other's records.
	mustRequest(t, a, id, lineage.Request{ID: "p1", Tool: "pay", At: sec(4)})
	if st := mustState(t, b, id); st.Seq != 4 || len(st.Pending) != 1 {
		t.Fatalf("b: state at seq %d with %d pending, want seq 4 and p1 pending", st.Seq, len(st.Pending))
	}
	if list, err := b.Pending(bg, id); err != nil || len(list) != 1 {
		t.Fatalf("b: pending = %v, %v", list, err)
	}
	mustRequest(t, a, id, lineage.Request{ID: "p2", Tool: "pay", At: sec(5)})
	// b never saw p2 as pending: not_pending is confirmed against the tail first.
	if v, err := b.Approve(bg, id, runtime.Approval{RequestID: "p2", By: "bob", At: sec(6)}); err != nil || v.Decision != lineage.Allow {
		t.Fatalf("b: approve p2 = %+v, %v; want allow", v, err)
	}
	// a still holds p2 as pending: its approval loses the seq, and then p2 is decided.
	if _, err := a.Approve(bg, id, runtime.Approval{RequestID: "p2", By: "alice", At: sec(7)}); !errors.Is(err, lineage.ErrNotPending) {
		t.Fatalf("a: second approval of p2: %v, want not_pending", err)
	}
	if _, err := a.Terminate(bg, id, runtime.Kill{By: "ops", At: sec(8)}); err != nil {
		t.Fatal(err)
	}
	if v := mustRequest(t, b, id, lineage.Request{ID: "r9", Tool: "t", At: sec(9)}); v.Reason != "terminated" {
		t.Fatalf("b: request after a's termination = %+v, want deny terminated", v)
	}
	sa, sb := mustState(t, a, id), mustState(t, b, id)
	if sa.Seq != sb.Seq || sa.Spent != 7 || sb.Spent != 7 {
		t.Fatalf("states differ or spent wrong: a seq %d spent %d, b seq %d spent %d; want spent 7", sa.Seq, sa.Spent, sb.Seq, sb.Spent)
	}
	if err := b.Verify(id); err != nil {
		t.Fatal(err)
	}
}

// TestNodesRace: 4 nodes and 32 callers race for the last 20 credits and for
// one request id: exactly 20 allowed, one record for the id.
func TestNodesRace(t *testing.T) {
	st := memory.NewShared()
	rt := nodes(4, st)
	id := mustCreate(t, rt[0], mustCompileYAML(t, nodesPolicy), runtime.CreateOptions{})
	var allowed, same atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var sameVerdicts []lineage.Verdict
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := rt[g%len(rt)]
			v, err := node.Request(bg, id, lineage.Request{ID: "once", Tool: "t", At: sec(1)})
			if err != nil {
				t.Error(err)
				return
			}
			same.Add(1)
			mu.Lock()
			sameVerdicts = append(sameVerdicts, v)
			mu.Unlock()
			for i := 0; i < 10; i++ {
				v, err := node.Request(bg, id, lineage.Request{ID: fmt.Sprintf("g%d_%d", g, i), Tool: "t", At: sec(2)})
				if err != nil {
					t.Error(err)
					return
				}
				if v.Decision == lineage.Allow {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for _, v := range sameVerdicts {
		if v != sameVerdicts[0] {
			t.Fatalf("request id \"once\" got two verdicts: %+v and %+v", v, sameVerdicts[0])
		}
	}
	if got := allowed.Load() + 1; got != 20 { // "once" took one credit
		t.Fatalf("%d credits allowed, want exactly 20", got)
	}
	recs, err := rt[1].Records(id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, rec := range recs {
		if rec.Kind == lineage.KindAction && bytes.Contains(rec.Body, []byte(`"id":"once"`)) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d records of request \"once\", want 1", n)
	}
}

// phantom is a real store whose next Append, once armed, is written and then
// reported as failed (store.ErrUnavailable): the database committed and the
// connection broke before the answer.
type phantom struct {
	*memory.Store
	armed atomic.Bool
}

func (p *phantom) Append(agent string, first uint64, recs ...[]byte) error {
	if err := p.Store.Append(agent, first, recs...); err != nil {
		return err
	}
	if p.armed.Swap(false) {
		return fmt.Errorf("%w: the connection broke after the commit", store.ErrUnavailable)
	}
	return nil
}

// TestAppendFailureDropsState: after an append that failed but was written,
// the runtime acknowledges nothing and answers the next calls from the store,
// not from the state it had (D132 (a failed append drops the agent)).
func TestAppendFailureDropsState(t *testing.T) {
	st := &phantom{Store: memory.New()}
	rt := runtime.Open(st, opts("phantom"))
	id := mustCreate(t, rt, mustCompileYAML(t, nodesPolicy), runtime.CreateOptions{})
	st.armed.Store(true)
	if v, err := rt.Request(bg, id, lineage.Request{ID: "r1", Tool: "t", At: sec(1)}); !errors.Is(err, store.ErrUnavailable) || v != (lineage.Verdict{}) {
		t.Fatalf("request over a failing append = %+v, %v; want no verdict and ErrUnavailable", v, err)
	}
	if s := mustState(t, rt, id); s.Seq != 2 || s.Spent != 1 {
		t.Fatalf("state after the phantom append: seq %d spent %d, want seq 2 spent 1 (the record is in the store)", s.Seq, s.Spent)
	}
	if v := mustRequest(t, rt, id, lineage.Request{ID: "r1", Tool: "t", At: sec(2)}); v.Seq != 2 || v.Decision != lineage.Allow {
		t.Fatalf("retry of r1 = %+v, want the stored allow at seq 2", v)
	}
	if n := len(storeLines(t, st, id)); n != 3 {
		t.Fatalf("%d records, want 3", n)
	}
}

// TestAgentTableBound: beyond MaxAgents the least recently used agents leave
// memory and come back by replaying (D134 (the agent table)).
func TestAgentTableBound(t *testing.T) {
	o := opts("lru")
	o.MaxAgents = 8
	rt := runtime.Open(memory.New(), o)
	c := mustCompileYAML(t, nodesPolicy)
	var ids []string
	for i := range 50 {
		id := mustCreate(t, rt, c, runtime.CreateOptions{})
		mustRequest(t, rt, id, lineage.Request{ID: "a", Tool: "t", At: sec(float64(i))})
		ids = append(ids, id)
		if n := rt.Loaded(); n > 8 {
			t.Fatalf("%d agents loaded, bound 8", n)
		}
	}
	for _, id := range ids {
		if v := mustRequest(t, rt, id, lineage.Request{ID: "a", Tool: "t", At: sec(99)}); v.Seq != 2 {
			t.Fatalf("%s: retry after eviction = %+v, want seq 2", id, v)
		}
		mustRequest(t, rt, id, lineage.Request{ID: "b", Tool: "t", At: sec(100)})
		if s := mustState(t, rt, id); s.Spent != 2 || s.Seq != 3 {
			t.Fatalf("%s: spent %d seq %d after reload, want 2 and 3", id, s.Spent, s.Seq)
		}
	}
	if n := rt.Loaded(); n != 8 {
		t.Fatalf("%d agents loaded, want 8", n)
	}
}

// TestAgentTableIdle: agents unused for IdleTimeout leave memory, also when
// no call comes (the timer), and come back on use (D134 (the agent table)).
func TestAgentTableIdle(t *testing.T) {
	o := opts("idle")
	o.IdleTimeout = 20 * time.Millisecond
	rt := runtime.Open(memory.New(), o)
	c := mustCompileYAML(t, nodesPolicy)
	var ids []string
	for range 5 {
		ids = append(ids, mustCreate(t, rt, c, runtime.CreateOptions{}))
	}
	deadline := time.Now().Add(10 * time.Second)
	for rt.Loaded() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d agents still loaded long after the idle timeout", rt.Loaded())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s := mustState(t, rt, ids[2]); s.Seq != 1 {
		t.Fatalf("state after idle eviction: seq %d, want 1", s.Seq)
	}
}

// BenchmarkAgentTable100k reports the Go heap after GC with 100,000 agents
// created and touched once (a request each), over the memory store (whose
// logs are in the heap either way), with and without a bound:
//
//	go test ./runtime -run '^$' -bench AgentTable100k -benchtime 1x
func BenchmarkAgentTable100k(b *testing.B) {
	for _, bound := range []int{0, 1000} {
		b.Run(fmt.Sprintf("max=%d", bound), func(b *testing.B) {
			for range b.N {
				o := opts("mem")
				o.MaxAgents = bound
				st := memory.New()
				rt := runtime.Open(st, o)
				c := mustCompileYAML(b, nodesPolicy)
				for i := range 100_000 {
					id := mustCreate(b, rt, c, runtime.CreateOptions{})
					mustRequest(b, rt, id, lineage.Request{ID: "a", Tool: "t", At: sec(float64(i))})
				}
				var ms goruntime.MemStats
				goruntime.GC()
				goruntime.ReadMemStats(&ms)
				b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
				b.ReportMetric(float64(rt.Loaded()), "loaded")
				goruntime.KeepAlive(rt)
				goruntime.KeepAlive(st)
			}
		})
	}
}

// TestNodesClockBehind: a node whose clock is behind the last record another
// node wrote records its request at that record's time, never earlier (D136 (clocks of several nodes)).
func TestNodesClockBehind(t *testing.T) {
	st := memory.NewShared()
	oa, ob := opts("clock"), reopenOpts()
	oa.Clock = func() time.Time { return sec(10) }
	ob.Clock = func() time.Time { return sec(5) }
	a, b := runtime.Open(st, oa), runtime.Open(st, ob)
	id := mustCreate(t, a, mustCompileYAML(t, nodesPolicy), runtime.CreateOptions{})
	mustState(t, b, id) // b loads the agent before a's next record
	mustRequest(t, a, id, lineage.Request{ID: "r1", Tool: "t"})
	v := mustRequest(t, b, id, lineage.Request{ID: "r2", Tool: "t"})
	recs, err := b.Records(id)
	if err != nil {
		t.Fatal(err)
	}
	if got := recs[v.Seq].At.Time; !got.Equal(sec(10)) {
		t.Fatalf("b recorded r2 at %s, want %s (a's last record)", got, sec(10))
	}
}

// TestReloadDoesNotRecompile: an agent that left the table comes back by
// replaying its log, and its policy, whose digest this runtime already
// prepared, is not compiled again (compileKnown; a restart still compiles
// each policy once).
func TestReloadDoesNotRecompile(t *testing.T) {
	o := opts("reload")
	o.MaxAgents = 1
	var compiles atomic.Int64
	o.Compile = func(doc []byte) (*policy.Compiled, error) {
		compiles.Add(1)
		return compileDoc(doc)
	}
	st := memory.New()
	rt := runtime.Open(st, o)
	c := mustCompileYAML(t, nodesPolicy)
	a := mustCreate(t, rt, c, runtime.CreateOptions{})
	b := mustCreate(t, rt, c, runtime.CreateOptions{}) // a leaves the table
	for i, id := range []string{a, b, a, b} {
		mustRequest(t, rt, id, lineage.Request{Tool: "t", At: sec(float64(i))})
	}
	if n := compiles.Load(); n != 0 {
		t.Fatalf("%d compilations for agents reloaded under a prepared policy, want 0", n)
	}
	// A policy the runtime never prepared is compiled (and checked) on open.
	rt2 := runtime.Open(st, o)
	mustRequest(t, rt2, a, lineage.Request{Tool: "t", At: sec(9)})
	if n := compiles.Load(); n != 1 {
		t.Fatalf("%d compilations opening an agent in a fresh runtime, want 1", n)
	}
}
