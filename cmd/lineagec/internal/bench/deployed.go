package bench

// The service benchmark as deployed (issue 20): OPA's server and the guard
// each in a process of its own, the load from a third, the same policies
// and decisions, the targets taking turns round by round; and the disk's
// fdatasync latency, measured in the same run, as the floor of a durable
// decision.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DeployedOptions size a benchmark of the guard as deployed.
type DeployedOptions struct {
	// Exe is the lineagec executable: it runs the guard (`serve`), the load
	// (`bench load`) and, without OPA, OPA's server (`bench opa-server`).
	Exe string
	// OPA is an opa executable to run as `opa run --server` ("": Exe's
	// `bench opa-server`, the OPA module lineage is built with).
	OPA string
	// Wrk is a wrk executable to drive each round's load ("": the builtin
	// load, a `bench load` process of Exe's).
	Wrk      string
	Clients  []int         // connections of each level (default 1, 16, 64)
	Agents   int           // agents per round (default 64); agent i is driven by connection i % connections
	Requests int           // decisions per agent at most (default 200)
	Duration time.Duration // a target's round ends after this long, or when the decisions run out (default 2 s)
	Rounds   int           // rounds per level, OPA and the guard in turn (default 3)
	Dir      string        // the guard's data and the sync probe go here ("": a temporary directory)
	// GuardCPUProfile, if set, is where the guard process writes a CPU
	// profile of its whole life (serve's hidden --cpuprofile); the memory
	// guard's goes to GuardCPUProfile.memory.
	GuardCPUProfile string
	// OPACPUProfile, if set, is where each of lineagec's own OPA servers
	// writes a CPU profile of its whole life: FILE.<policy>, one a policy
	// (bench opa-server's --cpuprofile; not with OPA).
	OPACPUProfile string
	// MemoryGuard adds a third target, "guard-memory": lineagec serve on
	// the memory store (serve's hidden --memory-store), nothing durable. It
	// measures what durability costs the guard, beside the guard and OPA.
	MemoryGuard bool
	Progress    io.Writer
}

// Process is one process the benchmark ran.
type Process struct {
	Role string `json:"role"` // "opa", "guard", "load" (one a round and target; a wrk a target with wrk)
	PID  int    `json:"pid"`
}

// Target is one of issue 20's targets as measured: Measured against Goal
// (≤ or ≥, as Rule says).
type Target struct {
	Name     string  `json:"name"`
	Measured float64 `json:"measured"`
	Rule     string  `json:"rule"` // ">=" or "<="
	Goal     float64 `json:"goal"`
	Met      bool    `json:"met"`
}

// DeployedResult is what a deployed benchmark measured. Rows have targets
// "opa" (OPA's server, stateless), "guard" (lineagec serve, file store,
// every verdict durable) and, with MemoryGuard, "guard-memory" (lineagec
// serve on the memory store).
type DeployedResult struct {
	Workload  Mix        `json:"workload"`
	Rows      []ServeRow `json:"rows"`
	SyncP50   int64      `json:"fdatasync_p50_ns"`
	SyncP99   int64      `json:"fdatasync_p99_ns"`
	SyncCount int        `json:"fdatasync_samples"`
	Targets   []Target   `json:"targets"`
	OPAServer string     `json:"opa_server"` // what ran OPA's server
	Load      string     `json:"load"`       // what drove the load: "wrk 4.1.0", "lineagec bench load"
	Processes []Process  `json:"processes"`
	CPUs      int        `json:"cpus"`
}

func (o *DeployedOptions) defaults() error {
	s := ServeOptions{Clients: o.Clients, Agents: o.Agents, Requests: o.Requests, Duration: o.Duration, Rounds: o.Rounds, Progress: o.Progress}
	if err := s.defaults(); err != nil {
		return err
	}
	o.Clients, o.Agents, o.Requests, o.Duration, o.Rounds, o.Progress = s.Clients, s.Agents, s.Requests, s.Duration, s.Rounds, s.Progress
	if o.Exe == "" {
		return errors.New("bench serve: no lineagec executable to run")
	}
	if o.Agents < 1 || o.Requests < 1 {
		return fmt.Errorf("bench serve: agents and requests must be at least 1 (%d, %d)", o.Agents, o.Requests)
	}
	if o.OPACPUProfile != "" && o.OPA != "" {
		return fmt.Errorf("bench serve: a CPU profile of OPA's server needs lineagec's own (--opa builtin), not %s", o.OPA)
	}
	return nil
}

// builtinLoad names the builtin load in a row.
const builtinLoad = "lineagec bench load"

// syncSamples is how many appends the sync probe times after each round.
const syncSamples = 100

// RunDeployed measures OPA's server and the guard, each its own process,
// from load processes, at each level of connections.
func RunDeployed(ctx context.Context, o DeployedOptions) (res *DeployedResult, err error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	say := func(format string, a ...any) { fmt.Fprintf(o.Progress, "bench serve: "+format+"\n", a...) }
	ws, err := serveWorkloads()
	if err != nil {
		return nil, err
	}
	res = &DeployedResult{CPUs: goruntime.NumCPU(), Load: builtinLoad}
	if o.Wrk != "" {
		if res.Load, err = WrkName(o.Wrk); err != nil {
			return nil, err
		}
	}
	say("recording the inputs: %d agents × %d decisions", o.Agents, o.Requests)
	inputs, resolved, mix, err := recordInputs(ctx, serveRuns(ws, o.Agents, o.Requests))
	if err != nil {
		return nil, err
	}
	res.Workload = mix

	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "lineage-bench-serve-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	var procs []*process
	defer func() {
		for _, p := range procs {
			if serr := p.stop(); serr != nil && err == nil {
				err = serr
			}
		}
	}()

	// OPA's server, one process per policy: every compiled policy is
	// package lineage.policy, so one server cannot hold two.
	res.OPAServer = "lineagec bench opa-server"
	if o.OPA != "" {
		res.OPAServer = o.OPA
	}
	urls := map[string]string{}
	var opaBases []string // by policy
	for _, w := range ws {
		pdir := filepath.Join(dir, "opa-"+w.name)
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			return nil, err
		}
		for j, m := range w.compiled.Modules {
			if err := os.WriteFile(filepath.Join(pdir, fmt.Sprintf("%02d.rego", j)), []byte(m.Source), 0o644); err != nil {
				return nil, err
			}
		}
		profile := ""
		if o.OPACPUProfile != "" {
			profile = o.OPACPUProfile + "." + w.name
		}
		p, base, err := startOPAProcess(ctx, o, pdir, profile)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		res.Processes = append(res.Processes, Process{Role: "opa", PID: p.cmd.Process.Pid})
		urls[w.compiled.Digest] = base + opaPath(w.compiled)
		opaBases = append(opaBases, base)
	}
	opaPlan := LoadPlan{Target: "opa", URLs: make([]string, o.Agents), Inputs: make([][]json.RawMessage, o.Agents), PIDs: pidsOf(res.Processes, "opa")}
	for i := range opaPlan.URLs {
		opaPlan.URLs[i] = urls[ws[i%len(ws)].compiled.Digest]
		for _, in := range inputs[i] {
			opaPlan.Inputs[i] = append(opaPlan.Inputs[i], in)
		}
	}
	opaPlanFile := filepath.Join(dir, "opa-plan.json")
	if err := writeJSONFile(opaPlanFile, opaPlan); err != nil {
		return nil, err
	}

	// The guard: lineagec serve on the file store in dir, as deployed; and
	// with MemoryGuard a second one on the memory store.
	type guardProcess struct{ role, base, tok, plan string }
	startGuard := func(role string, extra ...string) (guardProcess, error) {
		data := filepath.Join(dir, role)
		args := append([]string{"serve", "--addr", "127.0.0.1:0", "--data", data, "--log-level", "error", "--agent-rps", "0"}, extra...)
		p, base, err := startProcess(ctx, role, o.Exe, args, regexp.MustCompile(`serving .* on (http://\S+)`))
		if err != nil {
			return guardProcess{}, err
		}
		procs = append(procs, p)
		res.Processes = append(res.Processes, Process{Role: role, PID: p.cmd.Process.Pid})
		tokFile, err := os.ReadFile(filepath.Join(data, "admin.token"))
		if err != nil {
			return guardProcess{}, err
		}
		g := guardProcess{role: role, base: base, tok: strings.TrimSpace(string(tokFile)), plan: filepath.Join(dir, role+"-plan.json")}
		err = writeJSONFile(g.plan, LoadPlan{Target: "guard", URL: base, Token: g.tok,
			Agents: o.Agents, Requests: o.Requests, PIDs: pidsOf(res.Processes, role)})
		return g, err
	}
	var extra []string
	if o.GuardCPUProfile != "" {
		extra = []string{"--cpuprofile", o.GuardCPUProfile}
	}
	guard, err := startGuard("guard", extra...)
	if err != nil {
		return nil, err
	}
	guards := map[string]guardProcess{"guard": guard}
	targetNames := []string{"opa", "guard"}
	if o.MemoryGuard {
		extra := []string{"--memory-store"}
		if o.GuardCPUProfile != "" {
			extra = append(extra, "--cpuprofile", o.GuardCPUProfile+".memory")
		}
		if guards["guard-memory"], err = startGuard("guard-memory", extra...); err != nil {
			return nil, err
		}
		targetNames = append(targetNames, "guard-memory")
	}
	// One round of a target under the load: the builtin load process on
	// its plan; or wrk, on the recorded inputs for OPA, and for a guard on
	// fresh agents this process creates first.
	hc := newHTTPClient()
	defer hc.CloseIdleConnections()
	started := func(pid int) { res.Processes = append(res.Processes, Process{Role: "load", PID: pid}) }
	drive := func(target string, n int) (*LoadResult, error) {
		g := guards[target]
		if o.Wrk == "" {
			plan := opaPlanFile
			if target != "opa" {
				plan = g.plan
			}
			return runLoad(ctx, o.Exe, plan, n, o.Duration, started)
		}
		if target == "opa" {
			return runWrk(ctx, o.Wrk, dir, opaWrkTargets(ws, opaBases, inputs), false, opaPlan.PIDs, n, o.Duration, started)
		}
		_, created, err := createAgents(ctx, g.base, g.tok, hc, serveRuns(ws, o.Agents, o.Requests))
		if err != nil {
			return nil, err
		}
		reqs, err := guardWrkRequests(created, g.tok, resolved)
		if err != nil {
			return nil, err
		}
		return runWrk(ctx, o.Wrk, dir, []wrkTarget{{base: g.base, agents: reqs}}, true, pidsOf(res.Processes, g.role), n, o.Duration, started)
	}

	var syncs []time.Duration
	for _, n := range o.Clients {
		lats := map[string][]time.Duration{}
		walls := map[string]time.Duration{}
		cpus := map[string]time.Duration{}
		loadCPUs := map[string]time.Duration{}
		commits := map[string]int64{}
		cpuOK := true
		for round := 0; round < o.Rounds; round++ {
			for _, t := range targetNames {
				syncsBefore, serr := guardSyncs(ctx, hc, guards[t].base)
				if serr != nil {
					return nil, serr
				}
				lr, err := drive(t, n)
				if err != nil {
					return nil, fmt.Errorf("bench serve: %s, %d connections: %w", t, n, err)
				}
				syncsAfter, serr := guardSyncs(ctx, hc, guards[t].base)
				if serr != nil {
					return nil, serr
				}
				commits[t] += syncsAfter - syncsBefore
				cpus[t] += time.Duration(lr.CPU)
				loadCPUs[t] += time.Duration(lr.LoadCPU)
				cpuOK = cpuOK && lr.CPU >= 0
				for _, l := range lr.Latencies {
					lats[t] = append(lats[t], time.Duration(l))
				}
				walls[t] += time.Duration(lr.Wall)
			}
			s, err := syncFloor(dir, syncSamples)
			if err != nil {
				return nil, err
			}
			syncs = append(syncs, s...)
		}
		for _, t := range targetNames {
			r := row(t, n, lats[t], walls[t])
			r.Load = res.Load
			if cpuOK && r.Decisions > 0 {
				r.CPUPerDecision = int64(cpus[t]) / int64(r.Decisions)
			}
			if r.Decisions > 0 {
				r.LoadCPUPerDecision = int64(loadCPUs[t]) / int64(r.Decisions)
			}
			if commits[t] > 0 {
				r.DecisionsPerSync = float64(r.Decisions) / float64(commits[t])
			}
			res.Rows = append(res.Rows, r)
			perSync := ""
			if r.DecisionsPerSync > 0 {
				perSync = fmt.Sprintf(", %.1f decisions a sync", r.DecisionsPerSync)
			}
			say("%s, CPU %s a decision (the load's: %s)%s", r, time.Duration(r.CPUPerDecision), time.Duration(r.LoadCPUPerDecision), perSync)
		}
	}
	res.SyncP50, res.SyncP99, res.SyncCount = percentile(syncs, 50), percentile(syncs, 99), len(syncs)
	say("fdatasync of a 300-byte append: p50 %s, p99 %s (%d)", time.Duration(res.SyncP50), time.Duration(res.SyncP99), res.SyncCount)
	res.targets()
	return res, nil
}

// targets computes issue 20's targets of the service: at the most
// connections the guard's throughput ≥ OPA's and its p99 ≤ OPA's; at one
// connection the guard's p50 ≤ 1.15 × (OPA's p50 + one fdatasync's p50).
func (res *DeployedResult) targets() {
	find := func(target string, clients int) *ServeRow {
		for i := range res.Rows {
			if res.Rows[i].Target == target && res.Rows[i].Clients == clients {
				return &res.Rows[i]
			}
		}
		return nil
	}
	most, least := 0, 0
	for _, r := range res.Rows {
		most = max(most, r.Clients)
		if least == 0 || r.Clients < least {
			least = r.Clients
		}
	}
	add := func(name string, measured float64, rule string, goal float64) {
		met := measured >= goal
		if rule == "<=" {
			met = measured <= goal
		}
		res.Targets = append(res.Targets, Target{Name: name, Measured: measured, Rule: rule, Goal: goal, Met: met})
	}
	if a, g := find("opa", most), find("guard", most); a != nil && g != nil && a.PerSec > 0 && a.P99 > 0 {
		add(fmt.Sprintf("%d connections: guard decisions/s over OPA's", most), g.PerSec/a.PerSec, ">=", 1.0)
		add(fmt.Sprintf("%d connections: guard p99 over OPA's", most), float64(g.P99)/float64(a.P99), "<=", 1.0)
	}
	if a, g := find("opa", least), find("guard", least); a != nil && g != nil && a.P50+res.SyncP50 > 0 {
		add(fmt.Sprintf("%d connection(s): guard p50 over (OPA's p50 + fdatasync p50)", least),
			float64(g.P50)/float64(a.P50+res.SyncP50), "<=", 1.15)
	}
}

// guardSyncs is the group commits the guard at base has made so far: the
// count of lineage_store_sync_duration_seconds on its /metrics; 0 for a
// target that is not a guard on the file store (base "", or no such line).
func guardSyncs(ctx context.Context, hc *http.Client, base string) (int64, error) {
	if base == "" {
		return 0, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("bench serve: the guard's metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("bench serve: the guard's metrics: %s %v", resp.Status, err)
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "lineage_store_sync_duration_seconds_count "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("bench serve: the guard's metrics: %q: %w", line, err)
			}
			return n, nil
		}
	}
	return 0, nil
}

// process is a child process of the benchmark, its stderr kept for errors.
type process struct {
	role string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer // stderr, the first 64 KiB
	eof  chan struct{}
}

func (p *process) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.TrimSpace(p.out.String())
}

// startProcess starts exe args and waits (30 s at most) for a line of its
// stderr that ready matches; its first group is returned. With ready nil it
// returns once the process has started.
func startProcess(ctx context.Context, role, exe string, args []string, ready *regexp.Regexp) (*process, string, error) {
	p := &process{role: role, cmd: exec.Command(exe, args...), eof: make(chan struct{})}
	pipe, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, "", err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("bench serve: starting the %s: %w", role, err)
	}
	found := make(chan string, 1)
	re := ready
	go func() {
		defer close(p.eof)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			p.mu.Lock()
			if p.out.Len() < 64<<10 {
				p.out.WriteString(sc.Text() + "\n")
			}
			p.mu.Unlock()
			if re == nil {
				continue
			}
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				re = nil
			}
		}
		_, _ = io.Copy(io.Discard, pipe)
	}()
	if ready == nil {
		return p, "", nil
	}
	select {
	case s := <-found:
		return p, s, nil
	case <-p.eof:
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	_ = p.stop()
	return nil, "", fmt.Errorf("bench serve: the %s (%s %s) did not start:\n%s", role, exe, strings.Join(args, " "), p.stderr())
}

// startOPAProcess starts OPA's server on the modules of pdir and returns
// its base URL once it answers.
func startOPAProcess(ctx context.Context, o DeployedOptions, pdir, cpuProfile string) (*process, string, error) {
	if o.OPA == "" {
		args := []string{"bench", "opa-server", "--addr", "127.0.0.1:0", "--policy-dir", pdir}
		if cpuProfile != "" {
			args = append(args, "--cpuprofile", cpuProfile)
		}
		return startProcess(ctx, "opa", o.Exe, args, regexp.MustCompile(`serving .* on (http://\S+)`))
	}
	// opa itself prints nothing at --log-level error: a free port, then
	// its /health until it answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	addr := ln.Addr().String()
	ln.Close()
	args := []string{"run", "--server", "--addr", addr, "--log-level", "error", pdir}
	p, _, err := startProcess(ctx, "opa", o.OPA, args, nil)
	if err != nil {
		return nil, "", err
	}
	if err := waitHealth(ctx, "http://"+addr+"/health"); err != nil {
		_ = p.stop()
		return nil, "", fmt.Errorf("bench serve: the opa (%s %s) did not start: %w\n%s", o.OPA, strings.Join(args, " "), err, p.stderr())
	}
	return p, "http://" + addr, nil
}

// stop ends the process: SIGTERM, then SIGKILL after 30 s. A process that
// exits other than 0 on SIGTERM is an error.
func (p *process) stop() error {
	if p.cmd.ProcessState != nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() {
		select { // Wait closes the pipe: read it to its end first
		case <-p.eof:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.eof
		}
		done <- p.cmd.Wait()
	}()
	if err := <-done; err != nil {
		return fmt.Errorf("bench serve: the %s (pid %d) on SIGTERM: %w\n%s", p.role, p.cmd.Process.Pid, err, p.stderr())
	}
	return nil
}

// runLoad runs one load process (`lineagec bench load`) on plan and reads
// its result; started is told its PID.
func runLoad(ctx context.Context, exe, plan string, clients int, d time.Duration, started func(pid int)) (*LoadResult, error) {
	cmd := exec.CommandContext(ctx, exe, "bench", "load", "--plan", plan, "--connections", strconv.Itoa(clients), "--duration", d.String())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Start()
	if err == nil {
		started(cmd.Process.Pid)
		err = cmd.Wait()
	}
	if err != nil {
		return nil, fmt.Errorf("the load process: %w\n%s", err, strings.TrimSpace(stderr.String()))
	}
	var lr LoadResult
	if err := json.Unmarshal(stdout.Bytes(), &lr); err != nil {
		return nil, fmt.Errorf("the load process's output: %w", err)
	}
	if len(lr.Latencies) == 0 || lr.Wall <= 0 {
		return nil, errors.New("the load process made no decision")
	}
	lr.LoadCPU = int64(processCPU(cmd.ProcessState))
	return &lr, nil
}

// processCPU is the CPU time (user and system) an exited process used.
func processCPU(ps *os.ProcessState) time.Duration {
	if ps == nil {
		return 0
	}
	return ps.UserTime() + ps.SystemTime()
}

// pidsOf are the PIDs of procs in role.
func pidsOf(procs []Process, role string) []int {
	var pids []int
	for _, p := range procs {
		if p.Role == role {
			pids = append(pids, p.PID)
		}
	}
	return pids
}

func writeJSONFile(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(name, b, 0o600)
}

// waitHealth polls url until it answers 200 (30 s at most).
func waitHealth(ctx context.Context, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer in 30 s", url)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
