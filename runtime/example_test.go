package runtime_test

import (
	"context"
	"fmt"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

// Example guards one agent: a request within its budget is allowed, one
// that needs a person waits until someone approves it, and every verdict is
// a record of the agent's log, which a runtime opened anew replays.
func Example() {
	ctx := context.Background()
	c, err := compiler.Compile("policy.yaml", []byte(`
budget: 10
tools:
  read_invoice: { cost: 0 }
  pay_invoice:  { cost: 3, requires_approval: true }
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	st := memory.New() // or file.Open(dir, file.Options{})
	rt := runtime.Open(st, runtime.Options{})
	start := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC) // requests without At take the clock's time
	id, err := rt.CreateAgent(ctx, c, runtime.CreateOptions{Name: "invoice-bot", At: start})
	if err != nil {
		fmt.Println(err)
		return
	}

	v, _ := rt.Request(ctx, id, lineage.Request{Tool: "read_invoice", At: start.Add(time.Second)})
	fmt.Println(v.Decision, v.Reason, v.Seq)
	v, _ = rt.Request(ctx, id, lineage.Request{ID: "pay-1", Tool: "pay_invoice", At: start.Add(2 * time.Second)})
	fmt.Println(v.Decision, v.Reason, v.Seq)
	v, _ = rt.Request(ctx, id, lineage.Request{Tool: "run_shell", At: start.Add(3 * time.Second)})
	fmt.Println(v.Decision, v.Reason, v.Scar.Severity)
	v, _ = rt.Approve(ctx, id, runtime.Approval{RequestID: "pay-1", By: "alice", At: start.Add(time.Minute)})
	fmt.Println(v.Decision, v.Cost, v.Seq)

	// Another runtime over the same store replays the log to the same state.
	s, _ := runtime.Open(st, runtime.Options{}).State(ctx, id)
	fmt.Println(s.Remaining, s.ScarScore, s.Seq, rt.Verify(id))
	// Output:
	// allow ok 2
	// pending approval_required 3
	// deny unlisted_tool moderate
	// allow 3 5
	// 7 3 5 <nil>
}
