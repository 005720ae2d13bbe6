package server_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"testing"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/server"
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

// BenchmarkRequestHTTPLone is one client deciding one durable request at a
// time (bench serve's one connection, in one process): no quota, the log at
// error level as bench serve runs the guard. With -trace, `go tool trace
// -pprof=syscall` and `-pprof=sched` split its time between the journal's
// fdatasync, the sockets and the scheduler (docs/performance.md).
func BenchmarkRequestHTTPLone(b *testing.B) {
	e := startWith(b, func(c *server.Config) {
		c.AgentRPS = -1
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
	})
	created, err := e.admin.CreateAgent(bg, json.RawMessage(`{"budget": 1000000000, "tools": {"pay": {"cost": 1}}}`), "", "")
	if err != nil {
		b.Fatal(err)
	}
	bot := e.client(created.Token)
	args := map[string]any{"amount": json.Number("1")}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bot.Request(bg, created.Agent, lineage.Request{Tool: "pay", Args: args}); err != nil {
			b.Fatal(err)
		}
	}
}
