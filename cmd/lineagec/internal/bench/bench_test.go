package bench

import (
	"context"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/conformance/model"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/file"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

// TestRunSmall runs the whole measurement at a tiny size: every path must
// produce a number, and the workload must have the advertised mix of verdicts.
func TestRunSmall(t *testing.T) {
	res, err := Run(context.Background(), Options{Agents: 6, FileAgents: 3, Requests: 60, IdleAgents: 50, LongLog: 500})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]int64{
		"oracle p50": res.OracleP50, "raw OPA p50": res.RawOPAP50, "runtime mem p50": res.RuntimeMemP50,
		"runtime file p99": res.RuntimeFileP99, "state bytes": res.StateBytesPerAgent, "long log p50": res.LongLogP50,
	} {
		if v <= 0 {
			t.Errorf("%s = %d, want a measurement", name, v)
		}
	}
	m := res.Workload
	if m.Decisions != 6*60 || m.Allowed == 0 || m.Denied == 0 || m.Pending == 0 {
		t.Errorf("workload mix %+v: want allows, denials and pending verdicts over 360 decisions", m)
	}
	if len(m.Reasons) < 3 {
		t.Errorf("deny reasons %v: want at least three different reasons", m.Reasons)
	}
}

// TestRunRefusesBadSizes: sizes that cannot work are errors, not defaults or panics.
func TestRunRefusesBadSizes(t *testing.T) {
	for _, o := range []Options{{Agents: -5}, {Requests: -1}, {IdleAgents: 1}, {LongLog: -1}, {Store: "disk"}} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("Run(%+v) ran; want an error", o)
		}
	}
}

// The same paths as `lineagec bench`, as Go benchmarks for benchstat: one
// sub-benchmark per workload policy; each iteration is one decision (an
// agent's ops in order, a new agent when they run out).

// eachWorkload runs f as a sub-benchmark for each of the workload's policies.
func eachWorkload(b *testing.B, f func(b *testing.B, w *workload)) {
	ws, err := workloads()
	if err != nil {
		b.Fatal(err)
	}
	for _, w := range ws {
		b.Run(w.name, func(b *testing.B) { f(b, w) })
	}
}

func BenchmarkOracle(b *testing.B) { eachWorkload(b, benchOracle) }

func benchOracle(b *testing.B, w *workload) {
	if len(w.compiled.Policy.Rego) > 0 {
		b.Skip("the reference model runs no Rego extensions")
	}
	var (
		m   *model.Model
		run *agentRun
		k   int
	)
	for i := 0; i < b.N; i++ {
		if run == nil || k == len(run.ops) {
			b.StopTimer()
			run, k = &agentRun{w: w, ops: w.ops(uint64(i), 200)}, 0
			var err error
			if m, err = model.New("agt_bench", w.compiled.Policy, genesis); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		o := run.next(k)
		var v lineage.Verdict
		var err error
		if o.approve {
			v, err = m.Approve(o.req.ID, "bench", o.req.At)
		} else {
			v, err = m.Request(o.req)
		}
		if err != nil {
			b.Fatal(err)
		}
		run.saw(o, v)
		k++
	}
}

func benchRuntime(b *testing.B, w *workload, st store.Store) {
	ctx := context.Background()
	rt := runtime.Open(st, runtime.Options{})
	var (
		id  string
		run *agentRun
		k   int
	)
	// CPU time beside the wall clock: on a machine others share, the
	// scheduler moves the wall clock more than the work.
	var cpu, cpu0 int64
	for i := 0; i < b.N; i++ {
		if run == nil || k == len(run.ops) {
			b.StopTimer()
			if i > 0 {
				cpu += cpuTime() - cpu0
			}
			run, k = &agentRun{w: w, ops: w.ops(uint64(i), 200)}, 0
			var err error
			if id, err = rt.CreateAgent(ctx, w.compiled, runtime.CreateOptions{At: genesis}); err != nil {
				b.Fatal(err)
			}
			cpu0 = cpuTime()
			b.StartTimer()
		}
		if _, err := decideOne(ctx, rt, id, run, k); err != nil {
			b.Fatal(err)
		}
		k++
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu+cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

func BenchmarkRuntimeMemory(b *testing.B) {
	eachWorkload(b, func(b *testing.B, w *workload) { benchRuntime(b, w, memory.New()) })
}

func BenchmarkRuntimeFile(b *testing.B) {
	eachWorkload(b, func(b *testing.B, w *workload) {
		fs, err := file.Open(b.TempDir(), file.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer fs.Close()
		benchRuntime(b, w, fs)
	})
}

// BenchmarkRawOPA evaluates the inputs the runtime built for the same
// workload, with the runtime's own prepared query and options.
func BenchmarkRawOPA(b *testing.B) { eachWorkload(b, benchRawOPA) }

func benchRawOPA(b *testing.B, w *workload) {
	ctx := context.Background()
	var inputs []ast.Value
	rt := runtime.Open(memory.New(), runtime.Options{
		OnDecision: func(_ string, in ast.Value) { inputs = append(inputs, in) }})
	for a := 0; a < 10; a++ {
		id, err := rt.CreateAgent(ctx, w.compiled, runtime.CreateOptions{At: genesis})
		if err != nil {
			b.Fatal(err)
		}
		run := &agentRun{w: w, ops: w.ops(uint64(a), 200)}
		for k := range run.ops {
			if _, err := decideOne(ctx, rt, id, run, k); err != nil {
				b.Fatal(err)
			}
		}
	}
	pq, err := runtime.PrepareQuery(ctx, w.compiled, w.compiled.Query)
	if err != nil {
		b.Fatal(err)
	}
	opts := runtime.EvalOptions(w.compiled)
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		rs, err := pq.Eval(ctx, append(opts[:len(opts):len(opts)], rego.EvalParsedInput(inputs[i%len(inputs)]))...)
		if err != nil || len(rs) != 1 {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}
