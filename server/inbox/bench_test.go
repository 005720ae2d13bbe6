package inbox_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/lineage-guard/lineage"
)

// BenchmarkPendingPage renders the pending list of 20 agents with 5 pending
// requests each (the page opens every agent of the store).
func BenchmarkPendingPage(b *testing.B) {
	e := start(b)
	ctx := context.Background()
	for i := range 20 {
		agent, _, bot := e.agent(fmt.Sprintf("bot-%d", i))
		for j := range 5 {
			if _, err := bot.Request(ctx, agent, lineage.Request{ID: fmt.Sprintf("w%d", j), Tool: "wire", Args: map[string]any{"n": j}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	br := e.browser()
	if code, _ := br.signIn(e.apprTok); code != http.StatusSeeOther {
		b.Fatal(code)
	}
	b.ResetTimer()
	for b.Loop() {
		if resp, _ := br.get("/"); resp.StatusCode != 200 {
			b.Fatal(resp.StatusCode)
		}
	}
}
