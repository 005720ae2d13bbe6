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
// to one small in-process upstream along four paths, interleaved call by call
// in one run so that the machine's noise falls on all of them alike:
//
//   - direct: the client calls the upstream;
//   - hop: through a bare SDK server that forwards each call to the upstream
//     (what one more MCP hop costs, with no guard);
//   - proxy: through the proxy, each call a durable request to a real service
//     over a file store, then forwarded;
//   - guard: that request alone, from the same kind of client.
//
// It reports p50 and p99 of each, in µs, and what the proxy adds to a direct
// call (added = proxy − direct), and the proxy's own share once the hop and
// the guard's request are taken out (own = proxy − hop − guard), each at p50
// and p99 (docs/mcp.md, decision D160).
//
//	go test ./mcpproxy -run '^$' -bench ToolsCall -benchtime 3000x
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
	dial := func(t mcp.Transport) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, t, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cs.Close() })
		return cs
	}
	direct := dial(connect())
	hop := dial(newHop(b, dial(connect())))
	proxied := svc.connect(b, tok, connect(), proxyOpts{})
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "ping"}}
	call := func(cs *mcp.ClientSession) func(i int) {
		return func(int) {
			if res, err := cs.CallTool(ctx, params); err != nil || res.IsError {
				b.Fatalf("echo: %v %+v", err, res)
			}
		}
	}
	guard := svc.client(tok)
	paths := []struct {
		name string
		do   func(i int)
	}{
		{"direct", call(direct)},
		{"hop", call(hop)},
		{"proxy", call(proxied.ClientSession)},
		{"guard", func(i int) {
			id := fmt.Sprintf("bench-%d-%d", b.N, i)
			if _, err := guard.Request(ctx, agent, lineage.Request{ID: id, Tool: "echo", Args: map[string]any{"text": "ping"}}); err != nil {
				b.Fatal(err)
			}
		}},
	}
	lat := make([][]time.Duration, len(paths))
	for j := range lat {
		lat[j] = make([]time.Duration, 0, b.N)
	}
	b.ResetTimer()
	for i := range b.N {
		for k := range paths {
			j := (i + k) % len(paths) // each path goes first as often as the others
			t0 := time.Now()
			paths[j].do(i)
			lat[j] = append(lat[j], time.Since(t0))
		}
	}
	b.StopTimer()
	p50, p99 := map[string]float64{}, map[string]float64{}
	for j, p := range paths {
		slices.Sort(lat[j])
		p50[p.name] = float64(lat[j][len(lat[j])/2].Microseconds())
		p99[p.name] = float64(lat[j][len(lat[j])*99/100].Microseconds())
	}
	for _, name := range []string{"direct", "hop", "proxy", "guard"} {
		b.ReportMetric(p50[name], name+"-p50-µs")
		b.ReportMetric(p99[name], name+"-p99-µs")
	}
	b.ReportMetric(p50["proxy"]-p50["direct"], "added-p50-µs")
	b.ReportMetric(p99["proxy"]-p99["direct"], "added-p99-µs")
	b.ReportMetric(p50["proxy"]-p50["hop"]-p50["guard"], "own-p50-µs")
	b.ReportMetric(p99["proxy"]-p99["hop"]-p99["guard"], "own-p99-µs")
}

// newHop serves a bare SDK server that answers each tools/call by calling up
// with the same name and arguments and returning its result: one more MCP hop,
// built like the proxy's (a receiving middleware) but with no guard. It
// returns the transport a client connects to it with.
func newHop(b *testing.B, up *mcp.ClientSession) mcp.Transport {
	ctx := context.Background()
	s := mcp.NewServer(&mcp.Implementation{Name: "hop", Version: "1"}, nil)
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			ctr, ok := req.(*mcp.CallToolRequest)
			if method != "tools/call" || !ok {
				return next(ctx, method, req)
			}
			return up.CallTool(ctx, &mcp.CallToolParams{Name: ctr.Params.Name, Arguments: ctr.Params.Arguments})
		}
	})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ss.Close() })
	return ct
}
