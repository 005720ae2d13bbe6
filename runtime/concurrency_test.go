package runtime_test

import (
	"fmt"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
)

func concurrentStores(t *testing.T) map[string]func() store.Store {
	return map[string]func() store.Store{
		"memory": func() store.Store { return newMem() },
		"file": func() store.Store {
			st := openFileStore(t, t.TempDir())
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
}

// TestConcurrentLastCredits: 64 goroutines race for an agent's last 20
// credits. Exactly 20 requests are allowed, the last of them terminates the
// agent (budget_exhausted), every other one is denied, and the budget never
// goes below zero, not even in a state read during the race.
func TestConcurrentLastCredits(t *testing.T) {
	for name, mk := range concurrentStores(t) {
		t.Run(name, func(t *testing.T) {
			st := mk()
			o := opts("race")
			o.Clock = time.Now
			rt := runtime.Open(st, o)
			agent := mustCreate(t, rt, mustCompileYAML(t, "budget: 20\ntools: {pay: {cost: 1}}\n"), runtime.CreateOptions{})

			const goroutines, each = 64, 5
			var (
				mu       sync.Mutex
				verdicts []lineage.Verdict
				wg       sync.WaitGroup
				start    = make(chan struct{})
				done     atomic.Bool
				readErr  atomic.Value
			)
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for i := range each {
						v, err := rt.Request(bg, agent, lineage.Request{ID: fmt.Sprintf("g%d-%d", g, i), Tool: "pay"})
						if err != nil {
							t.Errorf("request: %v", err)
							return
						}
						mu.Lock()
						verdicts = append(verdicts, v)
						mu.Unlock()
					}
				}()
			}
			var readers sync.WaitGroup
			for range 2 { // readers racing the writers
				readers.Add(1)
				go func() {
					defer readers.Done()
					<-start
					for !done.Load() {
						s, err := rt.State(bg, agent)
						if err != nil || s.Remaining < 0 || s.Spent+s.Remaining != s.Budget || s.Calls["pay"] != s.Spent {
							readErr.Store(fmt.Sprintf("state during the race: %+v, %v", s, err))
							return
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			done.Store(true)
			readers.Wait()
			if e := readErr.Load(); e != nil {
				t.Fatal(e)
			}

			if len(verdicts) != goroutines*each {
				t.Fatalf("%d verdicts", len(verdicts))
			}
			var allowSeqs []int
			terminating := 0
			for _, v := range verdicts {
				switch {
				case v.Decision == lineage.Allow:
					allowSeqs = append(allowSeqs, int(v.Seq))
					if v.Cost != 1 {
						t.Errorf("allow %+v", v)
					}
					if v.Terminated == lineage.BudgetExhausted {
						terminating++
						if v.Seq != 21 {
							t.Errorf("terminating allow at seq %d, want 21", v.Seq)
						}
					} else if v.Terminated != "" {
						t.Errorf("allow %+v", v)
					}
				case v.Decision == lineage.Deny && v.Reason == "terminated":
					if v.Seq != 0 || v.Cost != 0 || v.Scar != nil {
						t.Errorf("terminated deny %+v", v)
					}
				case v.Decision == lineage.Deny && v.Reason == "insufficient_budget":
					if v.Seq == 0 || v.Scar != nil {
						t.Errorf("insufficient_budget deny %+v", v)
					}
				default:
					t.Errorf("unexpected verdict %+v", v)
				}
			}
			sort.Ints(allowSeqs)
			if len(allowSeqs) != 20 || terminating != 1 {
				t.Fatalf("%d allows (seqs %v), %d terminating; want 20 and 1", len(allowSeqs), allowSeqs, terminating)
			}
			for i, s := range allowSeqs {
				if s != i+2 {
					t.Fatalf("allow seqs %v, want 2..21", allowSeqs)
				}
			}
			s := mustState(t, rt, agent)
			if s.Remaining != 0 || s.Spent != 20 || s.Status != lineage.Terminated || s.Termination != lineage.BudgetExhausted ||
				s.Seq != 22 || s.Calls["pay"] != 20 {
				t.Errorf("final state %+v", s)
			}
			if err := rt.Verify(agent); err != nil {
				t.Fatal(err)
			}
			replayed := mustState(t, runtime.Open(st, reopenOpts()), agent)
			if !reflect.DeepEqual(normalizeState(s), normalizeState(replayed)) {
				t.Errorf("replay differs:\nlive   %+v\nreplay %+v", s, replayed)
			}
		})
	}
}

// TestConcurrentAgents: 50 agents × 20 requests at once, two goroutines per
// agent with retries mixed in; then a fresh runtime opens all of them at once,
// several goroutines racing to load each.
func TestConcurrentAgents(t *testing.T) {
	for name, mk := range concurrentStores(t) {
		t.Run(name, func(t *testing.T) {
			st := mk()
			o := opts("many")
			o.Clock = time.Now
			rt := runtime.Open(st, o)
			c := mustCompileYAML(t, "budget: 1000\nrate_limit: {max_actions: 100, window_secs: 60}\ntools: {pay: {cost: 2, max_calls: 20}, read: {cost: 0}}\n")
			const agents, perAgent, workers = 50, 20, 2
			ids := make([]string, agents)
			var wg sync.WaitGroup
			var created sync.Mutex
			for a := range agents {
				wg.Add(1)
				go func() { // creating agents races too
					defer wg.Done()
					id, err := rt.CreateAgent(bg, c, runtime.CreateOptions{At: t0})
					if err != nil {
						t.Error(err)
						return
					}
					created.Lock()
					ids[a] = id
					created.Unlock()
				}()
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			for a := range agents {
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := w; i < perAgent; i += workers {
							tool := []string{"pay", "read"}[i%2]
							req := lineage.Request{ID: fmt.Sprintf("r%d", i), Tool: tool, Args: map[string]any{"i": i}}
							v, err := rt.Request(bg, ids[a], req)
							if err != nil || v.Decision != lineage.Allow || v.RequestID != req.ID {
								t.Errorf("agent %d request %d: %+v, %v", a, i, v, err)
								return
							}
							again, err := rt.Request(bg, ids[a], req) // a retry
							if err != nil || !reflect.DeepEqual(again, v) {
								t.Errorf("agent %d retry %d: %+v, %v; want %+v", a, i, again, err, v)
								return
							}
						}
					}()
				}
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
			want := make([]lineage.State, agents)
			for a, id := range ids {
				s := mustState(t, rt, id)
				if s.Seq != 1+perAgent || s.Spent != perAgent || s.Calls["pay"] != perAgent/2 || s.Calls["read"] != perAgent/2 ||
					len(s.Window) != perAgent || s.Status != lineage.Alive {
					t.Errorf("agent %d: %+v", a, s)
				}
				if err := rt.Verify(id); err != nil {
					t.Errorf("agent %d: %v", a, err)
				}
				want[a] = normalizeState(s)
			}
			// A fresh runtime: four goroutines per agent race to load it.
			rt2 := runtime.Open(st, reopenOpts())
			for a, id := range ids {
				for range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						s, err := rt2.State(bg, id)
						if err != nil || !reflect.DeepEqual(normalizeState(s), want[a]) {
							t.Errorf("agent %d replayed: %+v, %v", a, s, err)
						}
					}()
				}
			}
			wg.Wait()
			// The reloaded agents take requests in parallel, once each.
			for _, id := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v, err := rt2.Request(bg, id, lineage.Request{ID: "after", Tool: "read"})
					if err != nil || v.Seq != 2+perAgent {
						t.Errorf("after reload: %+v, %v", v, err)
					}
				}()
			}
			wg.Wait()
			got, err := rt2.Agents()
			if err != nil || len(got) != agents {
				t.Errorf("Agents: %d, %v", len(got), err)
			}
		})
	}
}
