package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage/cmd/lineagec/internal/bench"
)

// runBenchDeployed is `lineagec bench serve` as deployed: this executable
// runs the guard, the load and (without an opa) OPA's server as processes
// of their own.
func runBenchDeployed(ctx context.Context, p benchServeParams, stdout, stderr io.Writer) error {
	// This executable by the name it was run as (a binary that is several
	// commands, as the tests' is, tells them apart by that name), else by
	// the kernel's word.
	exe, err := exec.LookPath(os.Args[0])
	if err != nil {
		if exe, err = os.Executable(); err != nil {
			return err
		}
	}
	opa := p.opa
	switch opa {
	case "builtin":
		opa = ""
	case "":
		opa, _ = exec.LookPath("opa") // "" when there is none
	}
	var wrk string // "": the builtin load
	switch p.load {
	case "builtin":
	case "":
		wrk, _ = exec.LookPath("wrk") // "" when there is none
	default:
		if wrk, err = exec.LookPath(p.load); err != nil {
			return fmt.Errorf("--load %s: %w", p.load, err)
		}
	}
	res, err := bench.RunDeployed(ctx, bench.DeployedOptions{Exe: exe, OPA: opa, Wrk: wrk, Clients: p.clients, Agents: p.agents,
		Requests: p.requests, Duration: p.duration, Rounds: p.rounds, GuardCPUProfile: p.guardCPUProfile,
		OPACPUProfile: p.opaCPUProfile, MemoryGuard: p.memoryGuard, Progress: stderr})
	if err != nil {
		return err
	}
	if p.json {
		return writeJSONIndent(stdout, res)
	}
	ns := func(v int64) string { return time.Duration(v).String() }
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "target\tconnections\tdecisions/s\tp50\tp99\tCPU a decision\tload\tits CPU a decision\t\n")
	for _, r := range res.Rows {
		name := map[string]string{"opa": "OPA server (stateless)", "guard": "lineagec serve (durable)", "guard-memory": "lineagec serve (memory, not durable)"}[r.Target]
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t\n", name, r.Clients, r.PerSec, ns(r.P50), ns(r.P99), ns(r.CPUPerDecision), r.Load, ns(r.LoadCPUPerDecision))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "workload: %d decisions: %d allowed, %d denied, %d pending\n", res.Workload.Decisions, res.Workload.Allowed, res.Workload.Denied, res.Workload.Pending)
	fmt.Fprintf(stdout, "fdatasync of a 300-byte append on the data directory's disk: p50 %s, p99 %s (%d appends)\n", ns(res.SyncP50), ns(res.SyncP99), res.SyncCount)
	for _, t := range res.Targets {
		fmt.Fprintf(stdout, "target: %s: %.2f× (goal %s %.2f: met %v)\n", t.Name, t.Measured, t.Rule, t.Goal, t.Met)
	}
	fmt.Fprintf(stdout, "OPA's server: %s; the load: %s; %d CPUs\n", res.OPAServer, res.Load, res.CPUs)
	return nil
}

// newBenchOPAServerCmd is `lineagec bench opa-server` (hidden): OPA's own
// server from the OPA module lineage is built with, for bench serve.
func newBenchOPAServerCmd(g *globalParams) *cobra.Command {
	var addr, dir, cpuProfile string
	cmd := &cobra.Command{
		Use:    "opa-server --addr ADDR --policy-dir DIR",
		Short:  "Serve the Rego of DIR with OPA's own server (for bench serve)",
		Hidden: true,
		Args:   argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			if cpuProfile != "" {
				stopProfile, err := benchSetup(-1, cpuProfile)
				if err != nil {
					return err
				}
				defer stopProfile()
			}
			return bench.ServeOPA(ctx, addr, dir, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8181", "address to listen on")
	cmd.Flags().StringVar(&dir, "policy-dir", "", "the directory of the .rego files to serve")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to FILE (go tool pprof)")
	return cmd
}

// newBenchLoadCmd is `lineagec bench load` (hidden): the load of bench
// serve, a process of its own; it prints its latencies as JSON.
func newBenchLoadCmd(g *globalParams) *cobra.Command {
	var (
		plan        string
		connections int
		duration    time.Duration
	)
	cmd := &cobra.Command{
		Use:    "load --plan FILE --connections N --duration D",
		Short:  "Drive one round of bench serve's load (for bench serve)",
		Hidden: true,
		Args:   argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := os.ReadFile(plan)
			if err != nil {
				return err
			}
			var lp bench.LoadPlan
			if err := json.Unmarshal(b, &lp); err != nil {
				return fmt.Errorf("--plan %s: %w", plan, err)
			}
			res, err := bench.Load(cmd.Context(), lp, connections, duration)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
		},
	}
	cmd.Flags().StringVar(&plan, "plan", "", "the plan file bench serve wrote")
	cmd.Flags().IntVar(&connections, "connections", 1, "concurrent keep-alive connections")
	cmd.Flags().DurationVar(&duration, "duration", 2*time.Second, "the longest the round runs")
	return cmd
}
