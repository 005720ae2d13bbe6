package mcpproxy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/mcpproxy"
)

// BenchmarkToolsCall measures tools/call round trips of the Go SDK's client
// to one small upstream along four paths, interleaved call by call in one run
// so that the machine's noise falls on all of them alike:
//
//   - direct: the client calls the upstream;
//   - hop: through a bare SDK server that forwards each call to the upstream
//     (what one more MCP hop costs, with no guard);
//   - proxy: through the proxy, each call a durable request to a real service
//     over a file store, then forwarded;
//   - guard: that request alone, from the same kind of client.
//
// It reports p50 and p99 of each, in µs, what the proxy adds to a direct call
// (added = proxy − direct) at p50 and p99, and the proxy's own share at p50
// once the hop and the guard's request are taken out (own = proxy − hop −
// guard); see docs/mcp.md and decision D160 (how the proxy's cost is measured). In "in-process" everything
// shares one process (and one garbage collector); in "processes" direct, hop
// and proxy are each a process of their own (this test binary again) that the
// client reaches over stdio, the upstream inside it, as a host runs
// `lineagec mcp` (with its GC setting, D163 ('lineagec mcp' runs its GC at 400 %)); the service stays in the
// benchmark's process.
//
//	go test ./mcpproxy -run '^$' -bench ToolsCall -benchtime 3000x
func BenchmarkToolsCall(b *testing.B) {
	svc := startService(b)
	agent, tok := svc.agent(`{"budget": 0, "tools": {"echo": {"cost": 0}}}`)
	ctx := context.Background()
	dial := func(b *testing.B, t mcp.Transport) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, t, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cs.Close() })
		return cs
	}
	b.Run("in-process", func(b *testing.B) {
		up := newTestUpstream("Echoes its text.", "")
		connect := func() mcp.Transport {
			st, ct := mcp.NewInMemoryTransports()
			if _, err := up.Connect(ctx, st, nil); err != nil {
				b.Fatal(err)
			}
			return ct
		}
		hop := serveHop(b, dial(b, connect()))
		measure(b, svc, agent, tok, dial(b, connect()), dial(b, hop), svc.connect(b, tok, connect(), proxyOpts{}).ClientSession)
	})
	b.Run("processes", func(b *testing.B) {
		role := func(role string, env ...string) mcp.Transport {
			exe, err := os.Executable()
			if err != nil {
				b.Fatal(err)
			}
			c := exec.Command(exe, "-test.run=^$")
			c.Env = append(append(os.Environ(), benchRoleEnv+"="+role), env...)
			c.Stderr = testWriter{b}
			return &mcp.CommandTransport{Command: c}
		}
		direct := dial(b, role("direct"))
		hop := dial(b, role("hop"))
		proxied := dial(b, role("proxy", benchGuardEnv+"="+svc.url, benchTokenEnv+"="+tok, benchStateEnv+"="+b.TempDir()))
		measure(b, svc, agent, tok, direct, hop, proxied)
	})
}

// measure calls the four paths b.N times each, interleaved, and reports.
func measure(b *testing.B, svc *service, agent, tok string, direct, hop, proxied *mcp.ClientSession) {
	ctx := context.Background()
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "ping"}}
	call := func(cs *mcp.ClientSession) func(i int) {
		return func(int) {
			if res, err := cs.CallTool(ctx, params); err != nil || res.IsError {
				b.Fatalf("echo: %v %+v", err, res)
			}
		}
	}
	guard := svc.client(tok)
	// A request id is [A-Za-z0-9._:~-]: the sub-benchmark's "/" would make it malformed.
	run := fmt.Sprintf("%s-%d", strings.ReplaceAll(b.Name(), "/", "."), time.Now().UnixNano())
	paths := []struct {
		name string
		do   func(i int)
	}{
		{"direct", call(direct)},
		{"hop", call(hop)},
		{"proxy", call(proxied)},
		{"guard", func(i int) {
			id := fmt.Sprintf("bench-%s-%d", run, i)
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
		b.ReportMetric(p50[p.name], p.name+"-p50-µs")
		b.ReportMetric(p99[p.name], p.name+"-p99-µs")
	}
	b.ReportMetric(p50["proxy"]-p50["direct"], "added-p50-µs")
	b.ReportMetric(p99["proxy"]-p99["direct"], "added-p99-µs")
	b.ReportMetric(p50["proxy"]-p50["hop"]-p50["guard"], "own-p50-µs")
}

// serveHop serves a bare SDK server that answers each tools/call by calling
// up with the same name and arguments and returning its result: one more MCP
// hop, built like the proxy's (a receiving middleware) but with no guard. It
// returns the transport a client connects to it with.
func serveHop(b *testing.B, up *mcp.ClientSession) mcp.Transport {
	st, ct := mcp.NewInMemoryTransports()
	ss, err := hopServer(up).Connect(context.Background(), st, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ss.Close() })
	return ct
}

func hopServer(up *mcp.ClientSession) *mcp.Server {
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
	return s
}

// The processes of BenchmarkToolsCall: this test binary with
// LINEAGE_MCP_BENCH_ROLE=direct, hop or proxy serves MCP on stdio, with the
// tests' upstream inside it (in memory); the proxy's guard and token come in
// the environment.
const (
	benchRoleEnv  = "LINEAGE_MCP_BENCH_ROLE"
	benchGuardEnv = "LINEAGE_MCP_BENCH_GUARD"
	benchTokenEnv = "LINEAGE_MCP_BENCH_TOKEN"
	benchStateEnv = "LINEAGE_MCP_BENCH_STATE"
)

func runBenchRole(role string) int {
	ctx := context.Background()
	up := newTestUpstream("Echoes its text.", "")
	var (
		srv *mcp.Server
		err error
	)
	switch role {
	case "direct":
		srv = up
	case "hop", "proxy":
		st, ct := mcp.NewInMemoryTransports()
		if _, err = up.Connect(ctx, st, nil); err != nil {
			break
		}
		if role == "hop" {
			var cs *mcp.ClientSession
			if cs, err = mcp.NewClient(&mcp.Implementation{Name: "hop", Version: "1"}, nil).Connect(ctx, ct, nil); err == nil {
				srv = hopServer(cs)
			}
			break
		}
		mcpproxy.SetGCPercent() // as lineagec mcp does
		var guard *client.Client
		if guard, err = client.New(os.Getenv(benchGuardEnv), os.Getenv(benchTokenEnv), nil); err != nil {
			break
		}
		var p *mcpproxy.Proxy
		if p, err = mcpproxy.New(ctx, mcpproxy.Config{Guard: guard, Upstream: ct, StateDir: os.Getenv(benchStateEnv), Stderr: os.Stderr}); err == nil {
			err = p.Run(ctx, &mcp.StdioTransport{}) // srv stays nil: served here
		}
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err == nil && srv != nil {
		err = srv.Run(ctx, &mcp.StdioTransport{})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench", role+":", err)
		return 1
	}
	return 0
}
