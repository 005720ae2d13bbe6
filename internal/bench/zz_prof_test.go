package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/profiler"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
)

func TestZZProfile(t *testing.T) {
	ws, _ := workloads()
	ctx := context.Background()
	for _, w := range ws {
		var inputs []ast.Value
		rt := runtime.Open(store.NewMemory(), runtime.Options{Compile: compile, OnDecision: func(_ string, in ast.Value) { inputs = append(inputs, in) }})
		for a := 0; a < 5; a++ {
			id, _ := rt.CreateAgent(ctx, w.compiled, runtime.CreateOptions{At: genesis})
			run := &agentRun{w: w, ops: w.ops(uint64(a), 200)}
			for k := range run.ops {
				decideOne(ctx, rt, id, run, k)
			}
		}
		pq, _ := runtime.PrepareQuery(ctx, w.compiled, w.compiled.Query)
		p := profiler.New()
		for _, in := range inputs {
			pq.Eval(ctx, rego.EvalParsedInput(in), rego.EvalQueryTracer(p))
		}
		fmt.Printf("=== %s: %d evals\n", w.name, len(inputs))
		for _, s := range p.ReportTopNResults(25, []string{"num_eval"}) {
			fmt.Printf("%6d evals %6d redo  %8.0f ns/eval-total  %s\n", s.NumEval, s.NumRedo, float64(s.ExprTimeNs)/float64(len(inputs)), s.Location)
		}
	}
}
