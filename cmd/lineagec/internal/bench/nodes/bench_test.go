package nodes

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net/url"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/runtime/store/postgres"
	"github.com/lineage-guard/lineage/runtime/store/postgres/pgtest"
	"github.com/lineage-guard/lineage/server"
)

// benchWindow is how long each measurement of BenchmarkNodes runs: pgbench's
// -T (rounded up to whole seconds) and each node count's window of
// decisions. The default keeps `-benchtime 1x` (CI) to a few seconds; a
// longer run: `go test ./cmd/lineagec/internal/bench/nodes -run '^$' -bench Nodes -nodes.window 10s`.
var benchWindow = flag.Duration("nodes.window", time.Second, "BenchmarkNodes: length of each measurement")

// benchCommitters sets each node's group commits in flight (0: the store's default).
var benchCommitters = flag.Int("nodes.committers", 0, "BenchmarkNodes: group commits in flight a node (0: the store's default)")

// benchProfile names the CPU profiles of BenchmarkNodes' windows (of the
// whole process: nodes and clients), one a node and client count:
// FILE.1nodes.64clients, ….
var benchProfile = flag.String("nodes.cpuprofile", "", "BenchmarkNodes: write each window's CPU profile to `FILE`.Nnodes.Kclients")

// benchClients lists the closed-loop client counts BenchmarkNodes measures,
// each with every node count, in one run (D210: the node benchmark's client count is a flag). With N closed-loop clients
// the mean latency is N / throughput, so the p99 target (≤ 20 ms) means
// something only at a count the nodes can serve in that time: compare
// `-nodes.clients 16,64`. The default, 64, keeps CI's run at its length.
var benchClients = flag.String("nodes.clients", "64", "BenchmarkNodes: comma-separated closed-loop client counts, each 1…100")

// clientCounts parses -nodes.clients: each count must be 1…benchAgents, so
// that every client owns at least one agent.
func clientCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 || k > benchAgents {
			return nil, fmt.Errorf("-nodes.clients %q: %q is not a client count 1…%d", s, f, benchAgents)
		}
		out = append(out, k)
	}
	return out, nil
}

const (
	benchAgents = 100
	// benchPoolConns is each node's pool (pool_max_conns, the store's
	// default: 2 committers and 4 more, D103 (group commit is one pipelined batch), D174 (two group commits in flight)); pgbench's ceiling for n
	// nodes runs n×benchPoolConns connections.
	benchPoolConns = 6
	benchWarm      = 300 * time.Millisecond // decisions before each window, not counted
	benchPolicy    = `{"budget": 1000000000, "tools": {"t": {"cost": 1}}}`
)

// benchRow is one line of BenchmarkNodes' table.
type benchRow struct {
	clients   int
	nodes     int
	ceiling   float64 // pgbench's tps with nodes×benchPoolConns connections
	rate      float64 // durable decisions/s through the nodes
	p50, p99  time.Duration
	perCommit float64 // appends a group commit in the window
	cpu       benchCPU
}

// benchCPU is the CPU used in a window: by this process (the nodes and the
// clients) and by PostgreSQL's processes (zero if they are not local).
type benchCPU struct{ node, pg time.Duration }

// perDecision is a CPU time in µs a decision at rate over the window.
func perDecision(d time.Duration, rate float64) float64 {
	return float64(d.Microseconds()) / (rate * benchWindow.Seconds())
}

// processCPU is the user and system CPU this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkNodes measures, in one run on one PostgreSQL (fsync on,
// synchronous_commit on), for 1, 2 and 3 serve nodes (in-process servers
// over HTTP on loopback, each with its own pool of benchPoolConns
// connections): the database's own ceiling, pgbench inserting one row of the
// size of one of our action records per transaction into a table shaped like
// lineage_records with as many connections as the nodes' pools; and the
// durable decisions/s and p50/p99 latency of 64 (-nodes.clients) closed-loop clients spread
// over the nodes (client i on node i mod n), deciding for 100 agents, each
// decision an allow recorded and acknowledged. Each client owns its agents
// (client i of k: agents i, i+k, …), so no two calls of one agent are in flight
// at once (D170 (one run, the ceiling next to the decisions)–D172 (cheap under '-benchtime 1x')). Everything shares this machine's cores: nodes,
// clients, PostgreSQL and pgbench.
//
// b.N is not a loop count: one run measures, for -nodes.window each.
func BenchmarkNodes(b *testing.B) {
	counts, err := clientCounts(*benchClients)
	if err != nil {
		b.Fatal(err)
	}
	// The nodes are serve nodes: the process's GC target is the one
	// `lineagec serve` sets (D221: 'lineagec serve' runs its GC at 400), unless $GOGC chooses.
	if server.SetGCPercent() {
		defer debug.SetGCPercent(100)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dbURL := pgtest.URL(b)
	nodeURL, err := withParam(dbURL, "pool_max_conns", fmt.Sprint(benchPoolConns))
	if err != nil {
		b.Fatal(err)
	}
	c := startCluster(b, nodeURL, nNodes)
	agents := make([]string, benchAgents)
	cls := make([][]*client.Client, benchAgents) // agent, node
	for i := range agents {
		agents[i], cls[i] = c.agent(ctx, benchPolicy)
	}
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close(context.Background())

	// One decision per agent, so that there is an action record to size
	// pgbench's row by.
	for i, a := range agents {
		if v, err := cls[i][0].Request(ctx, a, lineage.Request{ID: "size", Tool: "t"}); err != nil || v.Decision != lineage.Allow {
			b.Fatalf("%s: %+v, %v", a, v, err)
		}
	}
	var recSize int
	if err := db.QueryRow(ctx, `SELECT octet_length(rec) FROM lineage_records
		WHERE agent = $1 ORDER BY seq DESC LIMIT 1`, agents[0]).Scan(&recSize); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(ctx, `CREATE TABLE bench_records (LIKE lineage_records INCLUDING ALL);
		CREATE SEQUENCE bench_seq`); err != nil {
		b.Fatal(err)
	}
	script := fmt.Sprintf("INSERT INTO bench_records (agent, seq, rec) VALUES "+
		"('agt_' || :client_id, nextval('bench_seq'), convert_to(repeat('x', %d), 'UTF8'));\n", recSize)
	secs := int(math.Ceil(benchWindow.Seconds()))

	b.ResetTimer()
	var rows []benchRow
	for n := 1; n <= nNodes; n++ {
		ceiling := pgtest.Pgbench(b, dbURL, pgtest.Bench{Script: script, Clients: n * benchPoolConns, Seconds: secs})
		for _, k := range counts {
			row := benchRow{clients: k, nodes: n, ceiling: ceiling}
			row.rate, row.p50, row.p99, row.perCommit, row.cpu = benchDecide(b, ctx, c, db, agents, cls, n, k)
			rows = append(rows, row)
			reportRow(b, row, len(counts) > 1)
		}
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op") // one run, not b.N operations
	var tab strings.Builder
	fmt.Fprintf(&tab, "%d agents, %d-byte records, %v windows, pool %d a node:\n",
		benchAgents, recSize, *benchWindow, benchPoolConns)
	tw := tabwriter.NewWriter(&tab, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\tclients\tdecisions/s\tpgbench tps\tratio\tp50 ms\tp99 ms\tappends/commit\tnode CPU µs/dec\tPG CPU µs/dec\tcores used\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%.0f\t%.2f\t%.1f\t%.1f\t%.1f\t%.0f\t%.0f\t%.2f\t\n", r.nodes, r.clients, r.rate, r.ceiling, r.rate/r.ceiling,
			float64(r.p50.Microseconds())/1000, float64(r.p99.Microseconds())/1000, r.perCommit,
			perDecision(r.cpu.node, r.rate), perDecision(r.cpu.pg, r.rate),
			(r.cpu.node+r.cpu.pg).Seconds()/benchWindow.Seconds())
	}
	tw.Flush()
	b.Log("\n" + tab.String())
}

// reportRow reports one row's metrics, named by node count (and by client
// count when the run measures more than one).
func reportRow(b *testing.B, row benchRow, byClients bool) {
	sfx := fmt.Sprintf("%dnodes", row.nodes)
	if byClients {
		sfx += fmt.Sprintf("/%dclients", row.clients)
	}
	b.ReportMetric(row.ceiling, "pgbench-tps/"+sfx)
	b.ReportMetric(row.rate, "decisions/s/"+sfx)
	b.ReportMetric(row.rate/row.ceiling, "ratio/"+sfx)
	b.ReportMetric(float64(row.p50.Microseconds())/1000, "p50-ms/"+sfx)
	b.ReportMetric(float64(row.p99.Microseconds())/1000, "p99-ms/"+sfx)
	b.ReportMetric(row.perCommit, "appends/commit/"+sfx)
	b.ReportMetric(perDecision(row.cpu.node, row.rate), "node-cpu-µs/decision/"+sfx)
	b.ReportMetric(perDecision(row.cpu.pg, row.rate), "pg-cpu-µs/decision/"+sfx)
}

// benchDecide runs k closed-loop clients over the first n nodes
// for benchWarm and then *benchWindow, and returns the decisions/s completed
// in the window and their latencies' p50 and p99. Every answer must be an
// allow with a seq, and the log table must have grown by exactly the
// decisions acknowledged.
func benchDecide(b *testing.B, ctx context.Context, c *cluster, db *pgx.Conn, agents []string, cls [][]*client.Client, n, k int) (rate float64, p50, p99 time.Duration, perCommit float64, cpu benchCPU) {
	b.Helper()
	count := func() int64 {
		var recs int64
		if err := db.QueryRow(ctx, `SELECT count(*) FROM lineage_records`).Scan(&recs); err != nil {
			b.Fatal(err)
		}
		return recs
	}
	before := count()
	commits := func() (sum postgres.Stats) {
		for _, st := range c.stores[:n] {
			s := st.Stats()
			sum.Commits += s.Commits
			sum.Appends += s.Appends
		}
		return sum
	}
	var s0 postgres.Stats
	var (
		acked     atomic.Int64
		stop      atomic.Bool
		from, to  time.Time // the window, set before the clients start
		wg        sync.WaitGroup
		latencies = make([][]time.Duration, k)
	)
	start := time.Now()
	from = start.Add(benchWarm)
	to = from.Add(*benchWindow)
	for cl := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []int // this client's agents
			for a := cl; a < len(agents); a += k {
				mine = append(mine, a)
			}
			for i := 0; !stop.Load(); i++ {
				a := mine[i%len(mine)]
				t0 := time.Now()
				v, err := cls[a][cl%n].Request(ctx, agents[a], lineage.Request{ID: fmt.Sprintf("n%d_k%d_c%d_%d", n, k, cl, i), Tool: "t"})
				t1 := time.Now()
				if err != nil || v.Decision != lineage.Allow || v.Seq == 0 {
					b.Errorf("client %d on node %d, agent %s: %+v, %v; want an allow with a seq", cl, cl%n, agents[a], v, err)
					return
				}
				acked.Add(1)
				if !t1.Before(from) && t1.Before(to) {
					latencies[cl] = append(latencies[cl], t1.Sub(t0))
				}
			}
		}()
	}
	time.Sleep(time.Until(from))
	if *benchProfile != "" {
		f, err := os.Create(fmt.Sprintf("%s.%dnodes.%dclients", *benchProfile, n, k))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	s0 = commits()
	pg0, pgOK, err := pgtest.ServerCPU(ctx, db)
	if err != nil {
		b.Fatal(err)
	}
	go0 := processCPU(b)
	time.Sleep(time.Until(to))
	s1 := commits()
	cpu.node = processCPU(b) - go0
	if pg1, ok, err := pgtest.ServerCPU(ctx, db); err != nil {
		b.Fatal(err)
	} else if ok && pgOK {
		cpu.pg = pgtest.CPUSince(pg0, pg1)
	}
	stop.Store(true)
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	if grown := count() - before; grown != acked.Load() {
		b.Fatalf("%d nodes: %d decisions acknowledged, the log table grew by %d records", n, acked.Load(), grown)
	}
	all := slices.Concat(latencies...)
	if len(all) == 0 {
		b.Fatalf("%d nodes: no decision completed in the window", n)
	}
	slices.Sort(all)
	pct := func(p float64) time.Duration { return all[min(len(all)-1, int(p*float64(len(all))))] }
	return float64(len(all)) / benchWindow.Seconds(), pct(0.50), pct(0.99),
		float64(s1.Appends-s0.Appends) / float64(max(1, s1.Commits-s0.Commits)), cpu
}

// withParam returns the database URL u with the query parameter k set to v.
func withParam(u, k, v string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("the test database's URL: %w", err)
	}
	q := p.Query()
	q.Set(k, v)
	p.RawQuery = q.Encode()
	return p.String(), nil
}
