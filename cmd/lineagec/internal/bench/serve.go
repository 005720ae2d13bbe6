package bench

// The service benchmark (issue 10 item 7): one load generator, HTTP/1.1
// keep-alive on loopback, the same decisions against (a) OPA's own server
// serving the compiled Rego on the inputs the runtime built, (b) the guard
// service on the memory store, (c) on the file store, durable.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	goruntime "runtime"
	"strings"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/logging"
	"github.com/open-policy-agent/opa/v1/plugins"
	opaserver "github.com/open-policy-agent/opa/v1/server"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/api"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/policy"
	lineagerego "github.com/lineage-guard/lineage/rego"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/file"
	"github.com/lineage-guard/lineage/runtime/store/memory"
	"github.com/lineage-guard/lineage/server"
)

// ServeOptions size a service benchmark.
type ServeOptions struct {
	Clients  []int         // concurrent clients of each level (default 1, 16, 64)
	Agents   int           // agents per level (default 64); agent i is driven by client i % clients
	Requests int           // decisions per agent at most (default 200)
	Duration time.Duration // a target's round ends after this long, or when the decisions run out (default 2 s)
	Rounds   int           // rounds per level, the three targets in turn in each (default 3)
	Dir      string        // where the file stores go ("": a temporary directory)
	Progress io.Writer
}

// ServeRow is one target at one level.
type ServeRow struct {
	Target    string  `json:"target"` // "opa", "memory", "file"
	Clients   int     `json:"clients"`
	Decisions int     `json:"decisions"`
	PerSec    float64 `json:"decisions_per_sec"`
	P50       int64   `json:"p50_ns"`
	P99       int64   `json:"p99_ns"`
	// CPUPerDecision is the CPU time the target's server processes used in
	// its windows over the decisions they made (as deployed, on Linux only).
	CPUPerDecision int64 `json:"cpu_per_decision_ns,omitempty"`
	// LoadCPUPerDecision is the CPU time the load processes used, their
	// whole lives (start-up and report included), over the decisions (as
	// deployed).
	LoadCPUPerDecision int64 `json:"load_cpu_per_decision_ns,omitempty"`
	// Load is what drove the load as deployed: "wrk 4.1.0" (wrk's
	// version), "lineagec bench load" (the builtin load).
	Load string `json:"load,omitempty"`
	// DecisionsPerSync is, for the guard on the file store as deployed,
	// its decisions over the group commits (journal fdatasyncs) of its
	// rounds, its /metrics' lineage_store_sync_duration_seconds_count
	// before and after each; the agents' creation is in the count.
	DecisionsPerSync float64 `json:"decisions_per_sync,omitempty"`
}

// ServeResult is what a service benchmark measured.
type ServeResult struct {
	Workload Mix        `json:"workload"` // the verdicts of the recording run
	Rows     []ServeRow `json:"rows"`
	// FileOverOPA64 is (c)'s throughput over (a)'s at the largest level.
	FileOverOPA float64 `json:"file_over_opa_at_most_clients"`
	// Targets: (c) ≥ 1.0× (a) at the most clients with p99 ≤ 10 ms; (b) p50 ≤ 100 µs at 1 client.
	FileTargetMet   bool   `json:"file_target_met"`
	MemoryTargetMet bool   `json:"memory_target_met"`
	FileSyncMode    string `json:"file_sync_mode"`
	// HealthP50 and HealthP99 are GET /health's, one client: the HTTP round
	// trip with no decision, the floor under (b)'s p50.
	HealthP50  int64  `json:"health_p50_ns"`
	HealthP99  int64  `json:"health_p99_ns"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	GOGC       string `json:"gogc"`
}

// servePolicies are the workload's policies as the service benchmark runs
// them (D140: what the reliability tests hold the service to): without the CEL policy (OPA's server cannot load lineage's
// CEL builtin) and without a rate limit (the server's clock gives the time
// of a request over HTTP, so a steady agent would be rate_limited).
func serveWorkloads() ([]*workload, error) {
	all, err := workloads()
	if err != nil {
		return nil, err
	}
	var ws []*workload
	for i, src := range []string{invoicePolicy, celPolicy, extPolicy} {
		if all[i].name == "cel" {
			continue
		}
		src = strings.Replace(src, "rate_limit: {max_actions: 60, window_secs: 60}\n", "", 1)
		c, err := compiler.Compile("bench-serve-"+all[i].name+".yaml", []byte(src))
		if err != nil {
			return nil, fmt.Errorf("bench policy %s: %w", all[i].name, err)
		}
		all[i].compiled = c
		ws = append(ws, all[i])
	}
	return ws, nil
}

func (o *ServeOptions) defaults() error {
	if len(o.Clients) == 0 {
		o.Clients = []int{1, 16, 64}
	}
	if o.Agents == 0 {
		o.Agents = 64
	}
	if o.Requests == 0 {
		o.Requests = 200
	}
	if o.Duration == 0 {
		o.Duration = 2 * time.Second
	}
	if o.Rounds == 0 {
		o.Rounds = 3
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	for _, c := range o.Clients {
		if c < 1 {
			return fmt.Errorf("bench serve: clients must be at least 1, not %d", c)
		}
	}
	if o.Agents < 0 || o.Requests < 0 || o.Duration < 0 || o.Rounds < 0 {
		return fmt.Errorf("bench serve: sizes must not be negative (agents %d, requests %d, duration %s, rounds %d)", o.Agents, o.Requests, o.Duration, o.Rounds)
	}
	return nil
}

// RunServe measures (a), (b) and (c) side by side at each level of clients.
func RunServe(ctx context.Context, o ServeOptions) (*ServeResult, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	ws, err := serveWorkloads()
	if err != nil {
		return nil, err
	}
	res := &ServeResult{GOMAXPROCS: goruntime.GOMAXPROCS(0), GOGC: os.Getenv("GOGC")}
	if res.GOGC == "" {
		res.GOGC = "100 (default)"
	}
	say := func(format string, a ...any) { fmt.Fprintf(o.Progress, "bench serve: "+format+"\n", a...) }
	newRuns := func() []*agentRun { return serveRuns(ws, o.Agents, o.Requests) }

	// The inputs: every agent's decisions once through the runtime, each
	// decision's query input kept for OPA.
	say("recording the inputs: %d agents × %d decisions", o.Agents, o.Requests)
	inputs, _, mix, err := recordInputs(ctx, newRuns())
	if err != nil {
		return nil, err
	}
	res.Workload = mix

	hc := newHTTPClient()
	defer hc.CloseIdleConnections()

	opa, stopOPA, err := startOPA(ctx, ws)
	if err != nil {
		return nil, err
	}
	defer stopOPA()

	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "lineage-bench-serve-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	// The targets take turns, round by round, so that a change in the
	// machine's load falls on all three alike; a row sums its rounds.
	type acc struct {
		lat  []time.Duration
		wall time.Duration
	}
	for li, n := range o.Clients {
		sums := map[string]*acc{"opa": {}, "memory": {}, "file": {}}
		for round := 0; round < o.Rounds; round++ {
			// (a) OPA: each agent's recorded inputs, in order, to its policy's server.
			lat, wall, err := driveFor(ctx, o.Agents, n, o.Duration, func(i, k int) (bool, error) {
				if k >= len(inputs[i]) {
					return false, nil
				}
				return true, postOPA(ctx, hc, opa.urls[ws[i%len(ws)].compiled.Digest], inputs[i][k])
			})
			if err != nil {
				return nil, fmt.Errorf("bench serve: OPA: %w", err)
			}
			sums["opa"].lat, sums["opa"].wall = append(sums["opa"].lat, lat...), sums["opa"].wall+wall
			for _, target := range []string{"memory", "file"} {
				var st store.Store = memory.New()
				var fs *file.Store
				if target == "file" {
					if fs, err = file.Open(fmt.Sprintf("%s/level-%d-%d", dir, li, round), file.Options{}); err != nil {
						return nil, err
					}
					st = fs
					res.FileSyncMode = fs.SyncMode().String()
				}
				lat, wall, err := driveService(ctx, st, hc, newRuns(), n, o.Duration)
				if fs != nil {
					if cerr := fs.Close(); err == nil {
						err = cerr
					}
				}
				if err != nil {
					return nil, fmt.Errorf("bench serve: %s store: %w", target, err)
				}
				sums[target].lat, sums[target].wall = append(sums[target].lat, lat...), sums[target].wall+wall
			}
		}
		for _, target := range []string{"opa", "memory", "file"} {
			res.Rows = append(res.Rows, row(target, n, sums[target].lat, sums[target].wall))
			say("%s", res.Rows[len(res.Rows)-1])
		}
	}
	// The floor of one call: GET /health (no body, no decision) on the same
	// transport, one client.
	if res.HealthP50, res.HealthP99, err = healthFloor(ctx, hc, 2000); err != nil {
		return nil, err
	}
	say("GET /health, 1 client: p50 %s, p99 %s", time.Duration(res.HealthP50), time.Duration(res.HealthP99))
	res.targets()
	return res, nil
}

func (r ServeRow) String() string {
	return fmt.Sprintf("%-6s %2d clients: %6.0f decisions/s, p50 %s, p99 %s (%d decisions)",
		r.Target, r.Clients, r.PerSec, time.Duration(r.P50), time.Duration(r.P99), r.Decisions)
}

func row(target string, clients int, lat []time.Duration, wall time.Duration) ServeRow {
	return ServeRow{Target: target, Clients: clients, Decisions: len(lat), PerSec: float64(len(lat)) / wall.Seconds(),
		P50: percentile(lat, 50), P99: percentile(lat, 99)}
}

// serveRuns are the agents of one level: agent i runs policy i % len(ws)
// with the ops of seed i, the same in every process that makes them.
func serveRuns(ws []*workload, agents, requests int) []*agentRun {
	runs := make([]*agentRun, agents)
	for i := range runs {
		w := ws[i%len(ws)]
		runs[i] = &agentRun{w: w, ops: w.ops(uint64(i), requests)}
	}
	return runs
}

// recordInputs runs every agent's decisions once through the runtime on a
// memory store and keeps each decision's query input, as OPA's data API
// takes it ({"input": ...}), for OPA; each decision's op as it resolved
// (agentRun.next: an approval of a request that was not pending is a free
// read), for a load that cannot read the verdicts as it goes; and the
// verdicts' mix. The times differ from a server's clock, which no rule of
// these policies reads but the extension's input carries.
func recordInputs(ctx context.Context, runs []*agentRun) ([][][]byte, [][]op, Mix, error) {
	inputs := make([][][]byte, len(runs))
	resolved := make([][]op, len(runs))
	var last []byte
	rec := runtime.Open(memory.New(), runtime.Options{OnDecision: func(_ string, in ast.Value) {
		v, err := ast.JSON(in)
		if err == nil {
			last, err = json.Marshal(map[string]any{"input": v})
		}
		if err != nil {
			last = nil
		}
	}})
	mix := Mix{Reasons: map[string]int{}}
	for i, a := range runs {
		id, err := rec.CreateAgent(ctx, a.w.compiled, runtime.CreateOptions{At: genesis})
		if err != nil {
			return nil, nil, mix, err
		}
		for k := range a.ops {
			last = nil
			resolved[i] = append(resolved[i], a.next(k)) // what decideOne decides
			v, err := decideOne(ctx, rec, id, a, k)
			if err != nil {
				return nil, nil, mix, err
			}
			if last == nil {
				return nil, nil, mix, fmt.Errorf("bench serve: agent %d decision %d was not evaluated", i, k)
			}
			inputs[i] = append(inputs[i], last)
			mix.count(v)
		}
	}
	return inputs, resolved, mix, nil
}

// newHTTPClient is the load's client: HTTP/1.1 keep-alive, a connection
// kept per concurrent client.
func newHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxIdleConns: 1024, IdleConnTimeout: time.Minute}}
}

func (res *ServeResult) targets() {
	find := func(target string, clients int) *ServeRow {
		for i := range res.Rows {
			if res.Rows[i].Target == target && res.Rows[i].Clients == clients {
				return &res.Rows[i]
			}
		}
		return nil
	}
	most := 0
	for _, r := range res.Rows {
		most = max(most, r.Clients)
	}
	if a, c := find("opa", most), find("file", most); a != nil && c != nil && a.PerSec > 0 {
		res.FileOverOPA = c.PerSec / a.PerSec
		res.FileTargetMet = res.FileOverOPA >= 1.0 && c.P99 <= int64(10*time.Millisecond)
	}
	if b := find("memory", 1); b != nil {
		res.MemoryTargetMet = b.P50 <= int64(100*time.Microsecond)
	}
}

// driveFor runs agents' decisions on clients goroutines (agent i on
// goroutine i % clients, interleaved op by op) until do says there are no
// more or d has passed, timing each decision.
func driveFor(ctx context.Context, agents, clients int, d time.Duration, do func(agent, k int) (bool, error)) ([]time.Duration, time.Duration, error) {
	clients = min(clients, agents)
	lats := make([][]time.Duration, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for k := 0; ; k++ {
				any := false
				for i := w; i < agents; i += clients {
					if time.Now().After(deadline) || ctx.Err() != nil {
						return
					}
					t0 := time.Now()
					ok, err := do(i, k)
					if err != nil {
						errs[w] = fmt.Errorf("agent %d, decision %d: %w", i, k, err)
						return
					}
					if ok {
						lats[w] = append(lats[w], time.Since(t0))
						any = true
					}
				}
				if !any {
					return
				}
			}
		}(w)
	}
	wg.Wait()
	wall := time.Since(start)
	all, err := joinWorkers(lats, errs)
	if err != nil {
		return nil, 0, err
	}
	return all, wall, nil
}

// driveService starts the guard service over st on a loopback port, creates
// the agents through it, and drives their decisions over HTTP with the Go
// client: requests as agents, approvals as the admin.
func driveService(ctx context.Context, st store.Store, hc *http.Client, runs []*agentRun, clients int, d time.Duration) ([]time.Duration, time.Duration, error) {
	rt := runtime.Open(st, runtime.Options{})
	tok := server.NewToken()
	srv, err := server.New(server.Config{Runtime: rt, Key: server.NewKey(),
		Principals: []server.Entry{{Name: "bench", Role: server.RoleAdmin, TokenSHA256: server.TokenSHA256(tok)}}})
	if err != nil {
		return nil, 0, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, 0, err
	}
	hs := srv.HTTPServer("")
	go hs.Serve(ln)
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	return driveGuard(ctx, "http://"+ln.Addr().String(), tok, hc, runs, clients, d, nil)
}

// driveGuard creates runs' agents through the guard service at url (with
// the admin token tok) and drives their decisions over HTTP with the Go
// client, for d at most: requests as agents, approvals as the admin. begin,
// if not nil, is called once the agents exist, right before the decisions.
func driveGuard(ctx context.Context, url, tok string, hc *http.Client, runs []*agentRun, clients int, d time.Duration, begin func()) ([]time.Duration, time.Duration, error) {
	admin, created, err := createAgents(ctx, url, tok, hc, runs)
	if err != nil {
		return nil, 0, err
	}
	ids := make([]string, len(runs))
	bots := make([]*client.Client, len(runs))
	for i, c := range created {
		ids[i] = c.Agent
		if bots[i], err = client.New(url, c.Token, hc); err != nil {
			return nil, 0, err
		}
	}
	if begin != nil {
		begin()
	}
	return driveFor(ctx, len(runs), clients, d, func(i, k int) (bool, error) {
		a := runs[i]
		if k >= len(a.ops) {
			return false, nil
		}
		o := a.next(k)
		var v lineage.Verdict
		var err error
		if o.approve {
			v, err = admin.Approve(ctx, ids[i], o.req.ID)
		} else {
			v, err = bots[i].Request(ctx, ids[i], lineage.Request{ID: o.req.ID, Tool: o.req.Tool, Args: o.req.Args})
		}
		a.saw(o, v)
		return true, err
	})
}

// createAgents creates runs' agents through the guard service at url as
// the admin (token tok): the admin's client, and each agent's id and token.
func createAgents(ctx context.Context, url, tok string, hc *http.Client, runs []*agentRun) (*client.Client, []api.Created, error) {
	admin, err := client.New(url, tok, hc)
	if err != nil {
		return nil, nil, err
	}
	created := make([]api.Created, len(runs))
	for i, a := range runs {
		if created[i], err = admin.CreateAgent(ctx, a.w.compiled.Document, "", ""); err != nil {
			return nil, nil, err
		}
	}
	return admin, created, nil
}

// healthFloor times n calls of GET /health of the service on a memory store.
func healthFloor(ctx context.Context, hc *http.Client, n int) (int64, int64, error) {
	srv, err := server.New(server.Config{Runtime: runtime.Open(memory.New(), runtime.Options{}), Key: server.NewKey()})
	if err != nil {
		return 0, 0, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	hs := srv.HTTPServer("")
	go hs.Serve(ln)
	defer hs.Close()
	c, err := client.New("http://"+ln.Addr().String(), "", hc)
	if err != nil {
		return 0, 0, err
	}
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := c.Health(ctx); err != nil {
			return 0, 0, err
		}
		lat = append(lat, time.Since(t0))
	}
	return percentile(lat, 50), percentile(lat, 99), nil
}

// opaServers are OPA's own servers (package opa/v1/server with its plugin
// manager and in-memory store), one per workload policy: every compiled
// policy is package lineage.policy, so each needs a server of its own.
type opaServers struct {
	urls map[string]string // by policy digest: .../v1/data/lineage/policy/verdict
}

func startOPA(ctx context.Context, ws []*workload) (*opaServers, func(), error) {
	o := &opaServers{urls: map[string]string{}}
	var stops []func()
	stop := func() {
		for _, s := range stops {
			s()
		}
	}
	for _, w := range ws {
		if len(w.compiled.Options) > 0 {
			stop()
			return nil, nil, fmt.Errorf("bench serve: policy %s needs builtins OPA's server does not have", w.name)
		}
		h, stopH, err := opaHandler(ctx, w.compiled.Modules, nil)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("bench serve: OPA server for %s: %w", w.name, err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			stopH()
			stop()
			return nil, nil, err
		}
		hs := newOPAHTTPServer(h)
		go hs.Serve(ln)
		stops = append(stops, func() { _ = hs.Close(); stopH() })
		o.urls[w.compiled.Digest] = "http://" + ln.Addr().String() + opaPath(w.compiled)
	}
	return o, stop, nil
}

// opaHandler is OPA's own server (opa/v1/server with its plugin manager and
// in-memory store) holding modules, the way `opa run --server` serves them;
// logger nil is OPA's default logger.
func opaHandler(ctx context.Context, modules []lineagerego.Module, logger logging.Logger) (http.Handler, func(), error) {
	st := inmem.New()
	err := storage.Txn(ctx, st, storage.WriteParams, func(txn storage.Transaction) error {
		for _, m := range modules {
			if err := st.UpsertPolicy(ctx, txn, m.Name, []byte(m.Source)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	var opts []func(*plugins.Manager)
	if logger != nil {
		opts = append(opts, plugins.Logger(logger), plugins.ConsoleLogger(logger))
	}
	m, err := plugins.New([]byte{}, "lineage-bench", st, opts...)
	if err != nil {
		return nil, nil, err
	}
	if err := m.Start(ctx); err != nil {
		return nil, nil, err
	}
	s, err := opaserver.New().WithStore(st).WithManager(m).Init(ctx)
	if err != nil {
		m.Stop(ctx)
		return nil, nil, err
	}
	return s.Handler, func() { m.Stop(context.Background()) }, nil
}

// newOPAHTTPServer is the HTTP server around OPA's handler.
func newOPAHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}
}

// opaPath is the data API path of c's verdict query: /v1/data/lineage/policy/verdict.
func opaPath(c *policy.Compiled) string {
	return "/v1/data/" + strings.ReplaceAll(strings.TrimPrefix(c.Query, "data."), ".", "/")
}

// postOPA posts one input to OPA's data API at url and reads the verdict back.
func postOPA(ctx context.Context, hc *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return err
	}
	if resp.StatusCode != 200 || len(out.Result) == 0 {
		return fmt.Errorf("OPA answered %s with no verdict", resp.Status)
	}
	return nil
}
