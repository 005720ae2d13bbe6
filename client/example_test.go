package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/memory"
	"github.com/lineage-guard/lineage/server"
)

// Example talks to a guard service as its callers do: an admin creates an
// agent, the agent asks with its own token, and a person approves what
// waits. The service here is a real server over a memory store
// (lineagec serve in production).
func Example() {
	ctx := context.Background()
	adminToken := server.NewToken()
	srv, err := server.New(server.Config{
		Runtime:    runtime.Open(memory.New(), runtime.Options{}),
		Principals: []server.Entry{{Name: "root", Role: server.RoleAdmin, TokenSHA256: server.TokenSHA256(adminToken)}},
		Key:        server.NewKey(),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	ts := httptest.NewServer(srv)
	defer ts.Close()

	admin, _ := client.New(ts.URL, adminToken, nil)
	created, err := admin.CreateAgent(ctx, json.RawMessage(`{"budget": 10,
		"tools": {"read_invoice": {"cost": 0}, "pay_invoice": {"cost": 3, "requires_approval": true}}}`), "invoice-bot", "")
	if err != nil {
		fmt.Println(err)
		return
	}

	bot, _ := client.New(ts.URL, created.Token, nil) // the agent's own token
	v, _ := bot.Request(ctx, created.Agent, lineage.Request{Tool: "read_invoice"})
	fmt.Println(v.Decision, v.Reason)
	v, _ = bot.Request(ctx, created.Agent, lineage.Request{ID: "pay-1", Tool: "pay_invoice"})
	fmt.Println(v.Decision, v.Reason)
	_, err = bot.Approve(ctx, created.Agent, "pay-1")
	fmt.Println(errors.Is(err, lineage.ErrForbidden)) // an agent does not approve its own requests

	v, _ = admin.Approve(ctx, created.Agent, "pay-1")
	fmt.Println(v.Decision, v.Cost)
	st, _ := admin.State(ctx, created.Agent)
	fmt.Println(st.Remaining, st.Seq)
	// Output:
	// allow ok
	// pending approval_required
	// true
	// allow 3
	// 7 4
}
