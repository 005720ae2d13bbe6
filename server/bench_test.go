package server_test

import (
	"encoding/json"
	"testing"

	"github.com/lineage-guard/lineage"
)

// BenchmarkRequestHTTP is one durable decision over HTTP/1.1 keep-alive
// through the real client, on the file store, one agent per parallel client.
func BenchmarkRequestHTTP(b *testing.B) {
	e := start(b)
	args := map[string]any{"amount": json.Number("1")}
	b.SetParallelism(8) // 16 clients on 2 cores: group commit shares the syncs
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		created, err := e.admin.CreateAgent(bg, json.RawMessage(`{"budget": 1000000000, "tools": {"pay": {"cost": 1}}}`), "", "")
		if err != nil {
			b.Error(err)
			return
		}
		bot := e.client(created.Token)
		for pb.Next() {
			if _, err := bot.Request(bg, created.Agent, lineage.Request{Tool: "pay", Args: args}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
