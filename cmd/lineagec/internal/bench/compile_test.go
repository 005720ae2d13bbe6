package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/policy/policytest"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

// BenchmarkCompile measures what a policy of n tools costs before its first
// decision: the compiler (generation and OPA's check), then the runtime's
// preparation of its queries and one request. Its ns/tool is the figure the
// compile cost is judged by (linear: ns/tool flat from 100 to 10,000 tools).
func BenchmarkCompile(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 10000} {
		doc := policytest.ManyTools(n)
		b.Run(fmt.Sprintf("tools=%d", n), func(b *testing.B) {
			ctx := context.Background()
			cpu0 := cpuTime()
			var compiling time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				c, err := compiler.Compile("many.yaml", doc)
				if err != nil {
					b.Fatal(err)
				}
				compiling += time.Since(t0)
				rt := runtime.Open(memory.New(), runtime.Options{})
				id, err := rt.CreateAgent(ctx, c, runtime.CreateOptions{At: genesis})
				if err != nil {
					b.Fatal(err)
				}
				v, err := rt.Request(ctx, id, lineage.Request{Tool: fmt.Sprintf("tool_%05d", n-1), Args: map[string]any{"amount": 1}, At: genesis.Add(time.Second)})
				if err != nil {
					b.Fatal(err)
				}
				if v.Decision != lineage.Allow {
					b.Fatalf("first request: %+v, want allowed", v)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/tool")
			b.ReportMetric(float64(compiling.Nanoseconds())/float64(b.N), "compile-ns/op")
			// On a shared machine the process's CPU time shows the work
			// apart from the waiting (0 where it cannot be read).
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
