package runtime_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

// TestArgsSchemaConcurrentAgents: agents of one policy share its engine, and
// with it the cache where json.match_schema keeps the compiled schema (D320 (argument schemas are decided in Rego)
// (argument schemas in Rego)); requests of several agents at once are each
// decided on their own args (run with -race).
func TestArgsSchemaConcurrentAgents(t *testing.T) {
	rt := runtime.Open(memory.New(), opts("schema"))
	c := mustCompileYAML(t, schemaPolicy)
	var agents []string
	for i := 0; i < 4; i++ {
		agents = append(agents, mustCreate(t, rt, c, runtime.CreateOptions{}))
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(agents))
	for _, agent := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				args := map[string]any{"path": fmt.Sprintf("/tmp/%d", i), "n": i}
				want := lineage.Allow
				if i%4 == 3 {
					args["path"] = []any{"/etc"} // not a string
					want = lineage.Deny
				}
				v, err := rt.Request(bg, agent, lineage.Request{Tool: "read", Args: args, At: t0.Add(time.Hour + time.Duration(i)*time.Millisecond)})
				if err != nil || v.Decision != want || (want == lineage.Deny && v.Reason != "invalid_args") {
					errs <- fmt.Errorf("%s request %d %v: %+v %v", agent, i, args, v, err)
					return
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
