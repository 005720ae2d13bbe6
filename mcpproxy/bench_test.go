package mcpproxy_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lineage-guard/lineage"
)

// BenchmarkToolsCall measures tools/call round trips of the Go SDK's client
// to the same small in-process upstream, directly and through the proxy
// (whose every call is a durable request to a real service over a file
// store), in the same run; it reports p50 and p99 per call.
//
//	go test ./mcpproxy -run '^$' -bench ToolsCall -benchtime 2000x
func BenchmarkToolsCall(b *testing.B) {
	svc := startService(b)
	agent, tok := svc.agent(`{"budget": 0, "tools": {"echo": {"cost": 0}}}`)
	up := newTestUpstream("Echoes its text.", "")
	ctx := context.Background()
	connect := func() mcp.Transport {
		st, ct := mcp.NewInMemoryTransports()
		if _, err := up.Connect(ctx, st, nil); err != nil {
			b.Fatal(err)
		}
		return ct
	}
	direct, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, connect(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { direct.Close() })
	proxied := svc.connect(b, tok, connect(), proxyOpts{})
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "ping"}}
	call := func(cs *mcp.ClientSession) func(b *testing.B, i int) {
		return func(b *testing.B, _ int) {
			if res, err := cs.CallTool(ctx, params); err != nil || res.IsError {
				b.Fatalf("echo: %v %+v", err, res)
			}
		}
	}
	guard := svc.client(tok)
	cases := []struct {
		name string
		do   func(b *testing.B, i int)
	}{
		{"direct", call(direct)},
		{"proxy", call(proxied.ClientSession)},
		// The service's own share of a proxied call: one durable request.
		{"guard-request", func(b *testing.B, i int) {
			id := fmt.Sprintf("bench-%d-%d", b.N, i)
			if _, err := guard.Request(ctx, agent, lineage.Request{ID: id, Tool: "echo", Args: map[string]any{"text": "ping"}}); err != nil {
				b.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				c.do(b, i)
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
