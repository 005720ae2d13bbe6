package inbox

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

// unopenable is a store whose logs do not open (every Scan fails as damage)
// while its indexes answer.
type unopenable struct{ *memory.Store }

func (unopenable) Scan(agent string, _ func(uint64, []byte) error) error {
	return &store.DamageError{Agent: agent, Offset: -1, Reason: "test: unreadable"}
}

// TestPendingListsAnAgentThatDoesNotOpen: the inbox lists a pending request
// as the index has it, as the API and the CLI do, even when its agent does
// not open; the budget is then unknown and the row says why (D395 (a
// pending list lists the index)).
func TestPendingListsAnAgentThatDoesNotOpen(t *testing.T) {
	compile := func(doc []byte) (*policy.Compiled, error) { return compiler.Compile("", doc) }
	mem := memory.New()
	rt := runtime.Open(mem, runtime.Options{Compile: compile})
	c, err := compile([]byte(`{"budget": 10, "tools": {"wire": {"cost": 2, "requires_approval": true}}}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := rt.CreateAgent(ctx, c, runtime.CreateOptions{Name: "bot"})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := rt.Request(ctx, id, lineage.Request{ID: "w1", Tool: "wire"}); err != nil || v.Decision != lineage.Pending {
		t.Fatalf("request: %+v %v", v, err)
	}
	in := New(Backend{Runtime: runtime.Open(unopenable{mem}, runtime.Options{Compile: compile})})
	rows, _, err := in.pendingList(httptest.NewRequest("GET", "/", nil))
	if err != nil || len(rows) != 1 || rows[0].RequestID != "w1" || !strings.Contains(rows[0].Damaged, "test: unreadable") {
		t.Fatalf("pending rows %+v, %v: want w1, its agent not opening", rows, err)
	}
	var buf bytes.Buffer
	if err := in.rows.ExecuteTemplate(&buf, "pending-rows", pendingData{Rows: rows, CSRF: "x"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "log does not open: ") || strings.Contains(buf.String(), "budget left: approving") {
		t.Errorf("the row does not say its agent does not open:\n%s", buf.String())
	}
}
