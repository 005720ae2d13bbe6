package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage/cmd/lineagec/internal/bench"
)

type benchParams struct {
	*globalParams
	agents, fileAgents, requests, longLog, idle int
	store                                       string
	json                                        bool
	gogc                                        int
	cpuProfile                                  string
}

func newBenchCmd(g *globalParams) *cobra.Command {
	p := benchParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure decision latency and throughput against raw OPA and the reference model",
		Long: `Bench runs one workload over three policies — the product note's invoice
agent, a policy with CEL constraints and one with a Rego extension.
` + benchMixText() + `
It measures the same decisions through:
  (a) the reference model (plain Go, the floor),
  (b) OPA alone: the compiled Rego on the very inputs the runtime built,
      each evaluated right after a runtime decision (same heap, same caches),
      and on GOMAXPROCS goroutines for OPA's own throughput,
  (c) the runtime with the memory store,
  (d) the runtime with the file store, durable (group commit through the
      store's journal), with the store's sync latency and batch size.
It also replays a long log, compares a long-lived agent with a fresh one and
measures an idle agent's state. Progress goes to stderr; --json prints one object.
` + exitCodesHelp,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBench(cmd.Context(), p, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.IntVar(&p.agents, "agents", 1000, "agents in the memory-store run")
	f.IntVar(&p.fileAgents, "file-agents", 100, "concurrent agents in the file-store run")
	f.IntVar(&p.requests, "requests", 200, "decisions per agent")
	f.IntVar(&p.longLog, "long-log", 1_000_000, "records of the long-log agent (0 skips it)")
	f.IntVar(&p.idle, "idle-agents", 10_000, "agents for the idle state size")
	f.StringVar(&p.store, "store", "both", "memory, file or both")
	f.BoolVar(&p.json, "json", false, "print the results as one JSON object")
	f.IntVar(&p.gogc, "gogc", 400, "GC percent for the run (GOGC overrides; -1 leaves the default)")
	f.StringVar(&p.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to FILE (go tool pprof)")
	cmd.AddCommand(newBenchServeCmd(g), newBenchOPAServerCmd(g), newBenchLoadCmd(g))
	return cmd
}

type benchServeParams struct {
	*globalParams
	clients          []int
	agents, requests int
	rounds           int
	duration         time.Duration
	json             bool
	gogc             int
	cpuProfile       string
	inProcess        bool
	opa              string
	load             string
	guardCPUProfile  string
	opaCPUProfile    string
	memoryGuard      bool
}

func newBenchServeCmd(g *globalParams) *cobra.Command {
	p := benchServeParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Measure the guard service over HTTP beside OPA's own server",
		Long: `Bench serve drives one request mix (bench's invoice and extension policies,
without their rate limit; D140) over HTTP/1.1 keep-alive on loopback against
OPA's own server, evaluating the compiled Rego on the very inputs the runtime
built for these decisions, and against the guard service, at each level of
--clients, side by side: the targets take turns, --rounds times per level, each
round on fresh agents, for --duration at most.

As deployed (the default), each runs in a process of its own: OPA's server
(the opa on PATH, --opa PATH, or lineagec's own build of OPA's server with
--opa builtin; one process per policy), the guard (lineagec serve on the file
store in a temporary directory, every verdict durable before it is answered,
--guard-cpuprofile FILE for go tool pprof), and the load, a third process per
round: wrk (the wrk on PATH, or --load PATH) running a script this command
writes, else, with --load builtin or without a wrk, lineagec's own Go load
generator, which costs the shared cores more a request (docs/performance.md).
wrk's threads are one a CPU at most; OPA's two servers each get a wrk and
half the connections (at one connection one after the other, each for half
the duration); wrk takes whole seconds. Each row names its load and its CPU
time a decision. After each round it times 100 appends of 300 bytes, each
made durable with fdatasync, on the data directory's disk. It prints
decisions/s, p50 and p99 of each, the CPU time its server processes spent a
decision (Linux), and issue 20's targets as ratios: at the most clients the
guard's throughput over OPA's (goal >= 1.0) and its p99 over OPA's (<= 1.0);
at the fewest, the guard's p50 over OPA's p50 plus fdatasync's p50 (<= 1.15).
--memory-guard adds a third target, a second guard on the memory store
(nothing durable): beside the other two it shows what durability costs
(its CPU profile, with --guard-cpuprofile FILE, goes to FILE.memory).
--opa-cpuprofile FILE has each of lineagec's own OPA servers write a CPU
profile to FILE.<policy>.

With --in-process the load, OPA's server and the guard share this process, and
the guard runs on the memory store too: (a) OPA, (b) serve on the memory
store, (c) serve on the file store; the targets are then (c) at least (a)'s
throughput at the most clients with p99 <= 10ms, and (b) p50 <= 100µs at 1
client. --gogc and --cpuprofile apply to this mode only.
` + exitCodesHelp,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBenchServe(cmd.Context(), p, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&p.clients, "clients", []int{1, 16, 64}, "levels of concurrent clients")
	f.IntVar(&p.agents, "agents", 64, "agents per level (agent i is driven by client i % clients)")
	f.IntVar(&p.requests, "requests", 200, "decisions per agent at most")
	f.DurationVar(&p.duration, "duration", 2*time.Second, "the longest a target runs in one round")
	f.IntVar(&p.rounds, "rounds", 3, "rounds per level; the three targets take turns in each")
	f.BoolVar(&p.json, "json", false, "print the results as one JSON object")
	f.IntVar(&p.gogc, "gogc", 400, "GC percent for the run (GOGC overrides; -1 leaves the default)")
	f.StringVar(&p.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to FILE (go tool pprof)")
	f.BoolVar(&p.inProcess, "in-process", false, "run OPA's server, the guard and the load in this one process")
	f.StringVar(&p.opa, "opa", "", "the opa executable to run as OPA's server (default: opa on PATH, else builtin; builtin: lineagec's own)")
	f.StringVar(&p.load, "load", "", "the load generator: a wrk executable (default: wrk on PATH, else builtin; builtin: lineagec's own)")
	f.StringVar(&p.guardCPUProfile, "guard-cpuprofile", "", "the guard process writes a CPU profile of its whole run to FILE (go tool pprof)")
	f.StringVar(&p.opaCPUProfile, "opa-cpuprofile", "", "each of lineagec's own OPA servers writes a CPU profile of its whole run to FILE.<policy> (go tool pprof)")
	f.BoolVar(&p.memoryGuard, "memory-guard", false, "a third target: lineagec serve on the memory store, nothing durable (what durability costs)")
	return cmd
}

func runBenchServe(ctx context.Context, p benchServeParams, stdout, stderr io.Writer) error {
	if !p.inProcess {
		return runBenchDeployed(ctx, p, stdout, stderr)
	}
	stop, err := benchSetup(p.gogc, p.cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	res, err := bench.RunServe(ctx, bench.ServeOptions{Clients: p.clients, Agents: p.agents, Requests: p.requests,
		Duration: p.duration, Rounds: p.rounds, Progress: stderr})
	if err != nil {
		return err
	}
	if p.json {
		return writeJSONIndent(stdout, res)
	}
	ns := func(v int64) string { return time.Duration(v).String() }
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "target\tclients\tdecisions/s\tp50\tp99\t\n")
	for _, r := range res.Rows {
		name := map[string]string{"opa": "(a) OPA server", "memory": "(b) serve, memory", "file": "(c) serve, file"}[r.Target]
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t\n", name, r.Clients, r.PerSec, ns(r.P50), ns(r.P99))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "workload: %d decisions: %d allowed, %d denied, %d pending\n", res.Workload.Decisions, res.Workload.Allowed, res.Workload.Denied, res.Workload.Pending)
	fmt.Fprintf(stdout, "(c) over (a) at the most clients: %.2f× (target met: %v); (b) p50 at 1 client <= 100µs: %v\n",
		res.FileOverOPA, res.FileTargetMet, res.MemoryTargetMet)
	fmt.Fprintf(stdout, "GET /health, 1 client (the HTTP floor): p50 %s, p99 %s\n", ns(res.HealthP50), ns(res.HealthP99))
	fmt.Fprintf(stdout, "file store sync: %s; GOMAXPROCS %d, GOGC %s\n", res.FileSyncMode, res.GOMAXPROCS, res.GOGC)
	return nil
}

// benchMix is the workload's mix of verdicts as `lineagec bench` measures it
// at its default sizes (the "workload" line of its output; 200,000
// decisions: 157,987 allowed, 26,633 denied, 15,380 pending). The help states
// it; TestBenchHelpMix measures it again.
var benchMix = struct {
	allowed, denied, pending int      // percent of all decisions
	reasons                  []string // the deny reasons, most frequent first
}{79, 13, 8, []string{"unlisted_tool", "recipient_domain_not_allowed",
	"amount_over_limit", "max_calls_exceeded", "currency_not_allowed"}}

// benchMixText says the mix in the help's words.
func benchMixText() string {
	return fmt.Sprintf(`Of its decisions (200,000 at the default sizes) %d%% are allowed
(approvals included), %d%% denied for %d reasons
  %s
and %d%% pending, each approved by the agent's next decision. The run prints
the mix it measured (the "workload" line; in --json, "workload").`,
		benchMix.allowed, benchMix.denied, len(benchMix.reasons),
		strings.Join(benchMix.reasons[:3], ", ")+",\n  "+strings.Join(benchMix.reasons[3:], ", "),
		benchMix.pending)
}

// benchSetup sets the GC percent of a bench run and starts its CPU profile;
// stop ends the profile.
func benchSetup(gogc int, cpuProfile string) (stop func(), err error) {
	if os.Getenv("GOGC") == "" && gogc >= 0 {
		// OPA's evaluation allocates briskly; a larger heap target halves its GC cost.
		// Every path is measured under the same setting.
		debug.SetGCPercent(gogc)
		os.Setenv("GOGC", strconv.Itoa(gogc))
	}
	if cpuProfile == "" {
		return func() {}, nil
	}
	f, err := os.Create(cpuProfile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func runBench(ctx context.Context, p benchParams, stdout, stderr io.Writer) error {
	stop, err := benchSetup(p.gogc, p.cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	res, err := bench.Run(ctx, bench.Options{
		Agents: p.agents, FileAgents: p.fileAgents, Requests: p.requests, Store: p.store,
		LongLog: p.longLog, IdleAgents: p.idle, Dir: "", Progress: stderr,
	})
	if err != nil {
		return err
	}
	if p.json {
		return writeJSONIndent(stdout, res)
	}
	ns := func(v int64) string { return time.Duration(v).String() }
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "workload\t%d decisions: %d allowed, %d denied, %d pending\n", res.Workload.Decisions, res.Workload.Allowed, res.Workload.Denied, res.Workload.Pending)
	fmt.Fprintf(tw, "reference model p50\t%s\n", ns(res.OracleP50))
	fmt.Fprintf(tw, "raw OPA p50 / p99\t%s / %s\n", ns(res.RawOPAP50), ns(res.RawOPAP99))
	fmt.Fprintf(tw, "runtime, memory p50 / p99\t%s / %s (%.2f× raw OPA)\n", ns(res.RuntimeMemP50), ns(res.RuntimeMemP99), res.RuntimeMemOverRawOPA)
	for _, name := range []string{"invoice", "cel", "extension"} {
		if pl, ok := res.PerPolicy[name]; ok {
			fmt.Fprintf(tw, "  %s policy p50: raw OPA / runtime\t%s / %s (%.2f×)\n", name, ns(pl.RawOPAP50), ns(pl.RuntimeMemP50), pl.Ratio)
		}
	}
	fmt.Fprintf(tw, "runtime, memory throughput\t%.0f decisions/s (raw OPA on the same inputs: %.0f/s)\n", res.RuntimeMemPerSec, res.RawOPAPerSec)
	if res.RuntimeFilePerSec > 0 {
		fmt.Fprintf(tw, "runtime, file p50 / p99\t%s / %s\n", ns(res.RuntimeFileP50), ns(res.RuntimeFileP99))
		fmt.Fprintf(tw, "runtime, file throughput\t%.0f durable decisions/s\n", res.RuntimeFilePerSec)
		fmt.Fprintf(tw, "  one sync (%s) p50 / p99\t%s / %s (%.1f appends per sync)\n", res.FileSyncMode, ns(res.FileSyncP50), ns(res.FileSyncP99), res.FileAppendsPerSync)
	}
	if res.LongLogRecords > 0 {
		fmt.Fprintf(tw, "long log p50 (%d records)\t%s (%.2f× a fresh agent's %s)\n", res.LongLogRecords, ns(res.LongLogP50), res.LongLogOverFresh, ns(res.FreshP50))
		fmt.Fprintf(tw, "replay\t%.0f records/s\n", res.ReplayRecordsPerSec)
	}
	fmt.Fprintf(tw, "idle agent state\t%d bytes\n", res.StateBytesPerAgent)
	fmt.Fprintf(tw, "GOMAXPROCS / GOGC\t%d / %s\n", res.GOMAXPROCS, res.GOGC)
	return tw.Flush()
}
