package runtime_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/policy/policytest"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

// TestSharedCompilation: runtimes that prepare one compiled policy at once,
// each on the compiler's own OPA compilation (D61: compiled once), and decide at once, decide
// as the policy says (run with -race: the compilation is shared, read only).
// The policy is large enough to be a table (D60: a policy of more than 64 tools is a table).
func TestSharedCompilation(t *testing.T) {
	c, err := compiler.Compile("many.yaml", policytest.ManyTools(100))
	if err != nil {
		t.Fatal(err)
	}
	if c.Compiler == nil {
		t.Fatal("the compiled policy carries no OPA compilation")
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt := runtime.Open(memory.New(), runtime.Options{Compile: compileDoc})
			id, err := rt.CreateAgent(bg, c, runtime.CreateOptions{At: t0})
			if err != nil {
				errs <- err
				return
			}
			for i := 0; i < 20; i++ {
				// tool_00001: cost 1, no cap; tool_00002: max_calls 12; tool_00007: approval,
				// pending until the default max_pending (10) are.
				approval := lineage.Pending
				if i >= 10 {
					approval = lineage.Deny
				}
				for _, want := range []struct {
					tool     string
					decision lineage.Decision
				}{{"tool_00001", lineage.Allow}, {"tool_00007", approval}, {"nope", lineage.Allow}} {
					v, err := rt.Request(bg, id, lineage.Request{Tool: want.tool, At: sec(float64(3*i) + 100)})
					if err != nil {
						errs <- err
						return
					}
					if want.tool == "nope" {
						continue // the default rule: allowed until its cap, then denied
					}
					if v.Decision != want.decision {
						errs <- fmt.Errorf("%s: %+v, want %s", want.tool, v, want.decision)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
