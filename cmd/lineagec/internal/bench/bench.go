// Package bench measures lineage's decision path side by side with its floors:
// the reference model (plain Go), OPA alone on the same inputs, the runtime
// with the memory store and with the fsync'd file store; plus replay speed, a
// long log and the size of an idle agent's state. `lineagec bench` and the Go
// benchmarks run it.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	goruntime "runtime"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/conformance/model"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/file"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

// Options size a run.
type Options struct {
	Agents     int    // agents in the memory-store throughput run
	FileAgents int    // concurrent agents in the file-store run
	Requests   int    // operations per agent
	Store      string // "memory", "file" or "both"
	LongLog    int    // records in the long-log agent (0: skip)
	IdleAgents int    // agents for the state-size measurement
	Dir        string // where the file store goes ("": a temporary directory)
	Progress   io.Writer
}

// Result is what a run measured. Latencies are per decision (a request or an approval).
type Result struct {
	Workload                    Mix                      `json:"workload"`
	OracleP50                   int64                    `json:"oracle_p50_ns"`
	RawOPAP50                   int64                    `json:"raw_opa_p50_ns"`
	RawOPAP99                   int64                    `json:"raw_opa_p99_ns"`
	PerPolicy                   map[string]PolicyLatency `json:"per_policy"`
	RuntimeMemP50               int64                    `json:"runtime_mem_p50_ns"`
	RuntimeMemP99               int64                    `json:"runtime_mem_p99_ns"`
	RuntimeMemPerSec            float64                  `json:"runtime_mem_decisions_per_sec"`
	RawOPAPerSec                float64                  `json:"raw_opa_decisions_per_sec"`
	RuntimeMemOverRawOPA        float64                  `json:"runtime_mem_p50_over_raw_opa_p50"`
	RuntimeFilePerSec           float64                  `json:"runtime_file_decisions_per_sec,omitempty"`
	RuntimeFileP50              int64                    `json:"runtime_file_p50_ns,omitempty"`
	RuntimeFileP99              int64                    `json:"runtime_file_p99_ns,omitempty"`
	FileSyncP50                 int64                    `json:"file_sync_p50_ns,omitempty"`
	FileSyncP99                 int64                    `json:"file_sync_p99_ns,omitempty"`
	FileAppendsPerSync          float64                  `json:"file_appends_per_sync,omitempty"`
	FileSyncMode                string                   `json:"file_sync_mode,omitempty"`
	ReplayRecordsPerSec         float64                  `json:"replay_records_per_sec,omitempty"`
	StateBytesPerAgent          int64                    `json:"state_bytes_per_agent"`
	FreshP50                    int64                    `json:"fresh_agent_p50_ns,omitempty"`
	LongLogP50                  int64                    `json:"long_log_p50_ns,omitempty"`
	LongLogRecords              int                      `json:"long_log_records,omitempty"`
	LongLogOverFresh            float64                  `json:"long_log_p50_over_fresh_p50,omitempty"`
	GOMAXPROCS                  int                      `json:"gomaxprocs"`
	GOGC                        string                   `json:"gogc"`
	OracleCoversExtensionPolicy bool                     `json:"oracle_covers_extension_policy"`
}

// PolicyLatency is one workload policy's p50s on the single-goroutine runs.
type PolicyLatency struct {
	RawOPAP50     int64   `json:"raw_opa_p50_ns"`
	RuntimeMemP50 int64   `json:"runtime_mem_p50_ns"`
	Ratio         float64 `json:"runtime_over_raw_opa"`
}

// Mix counts the verdicts of the memory-store run.
type Mix struct {
	Decisions int            `json:"decisions"`
	Allowed   int            `json:"allowed"`
	Denied    int            `json:"denied"`
	Pending   int            `json:"pending"`
	Reasons   map[string]int `json:"deny_reasons"`
}

// op is one decision of the workload: a request, or the approval of an earlier pending one.
type op struct {
	approve bool
	req     lineage.Request
}

type workload struct {
	name     string
	compiled *policy.Compiled
	menu     func(r *rand.Rand, i int) lineage.Request
	// read is the free tool an approval step turns into when the request
	// before it was not left pending (denied by max_calls, say).
	read string
}

// agentRun is one agent's ops and whether its last request was left pending.
type agentRun struct {
	w       *workload
	ops     []op
	pending bool
}

// next resolves op k for this agent: an approval of a request that is not
// pending becomes a free read, so every path makes the same decisions.
func (a *agentRun) next(k int) op {
	o := a.ops[k]
	if o.approve && !a.pending {
		return op{req: lineage.Request{Tool: a.w.read, At: o.req.At}}
	}
	return o
}

func (a *agentRun) saw(o op, v lineage.Verdict) {
	a.pending = !o.approve && v.Decision == lineage.Pending
}

func workloads() ([]*workload, error) {
	w := []*workload{
		{name: "invoice", read: "read_invoice", menu: func(r *rand.Rand, i int) lineage.Request {
			switch x := r.IntN(100); {
			case x < 55:
				return lineage.Request{Tool: "read_invoice", Args: map[string]any{"invoice": json.Number(fmt.Sprint(i))}}
			case x < 75:
				return lineage.Request{Tool: "llm_turn"}
			case x < 85:
				return lineage.Request{Tool: "pay_invoice", ID: fmt.Sprintf("pay-%d", i), Args: map[string]any{"invoice": json.Number(fmt.Sprint(i))}}
			default:
				return lineage.Request{Tool: []string{"run_shell", "update_vendor_bank_details"}[r.IntN(2)]}
			}
		}},
		{name: "cel", read: "read_invoice", menu: func(r *rand.Rand, i int) lineage.Request {
			amount := json.Number(fmt.Sprint(r.IntN(6000)))
			switch x := r.IntN(100); {
			case x < 45:
				return lineage.Request{Tool: "read_invoice"}
			case x < 90:
				cur := "EUR"
				if r.IntN(10) == 0 {
					cur = "GBP"
				}
				return lineage.Request{Tool: "pay_invoice", Args: map[string]any{"amount": amount, "currency": cur}}
			default:
				return lineage.Request{Tool: "wire", ID: fmt.Sprintf("wire-%d", i), Args: map[string]any{"amount": amount}}
			}
		}},
		{name: "extension", read: "read_inbox", menu: func(r *rand.Rand, i int) lineage.Request {
			switch x := r.IntN(100); {
			case x < 40:
				return lineage.Request{Tool: "read_inbox"}
			case x < 90:
				to := "ap@example.com"
				if r.IntN(4) == 0 {
					to = "someone@elsewhere.test"
				}
				return lineage.Request{Tool: "send_email", Args: map[string]any{"to": to, "subject": "invoice " + fmt.Sprint(i)}}
			default:
				return lineage.Request{Tool: "send_invoice", ID: fmt.Sprintf("inv-%d", i), Args: map[string]any{"to": "ap@partner.example"}}
			}
		}},
	}
	for i, src := range []string{invoicePolicy, celPolicy, extPolicy} {
		c, err := compiler.Compile("bench-"+w[i].name+".yaml", []byte(src))
		if err != nil {
			return nil, fmt.Errorf("bench policy %s: %w", w[i].name, err)
		}
		w[i].compiled = c
	}
	return w, nil
}

// genesis is where every agent's clock starts; decisions are 1.1 s apart, so
// the rate limit (60 in 60 s) is near but never reached by a steady agent.
var genesis = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const step = 1100 * time.Millisecond

// ops makes one agent's sequence: each pending request is approved by the next op.
func (w *workload) ops(seed uint64, n int) []op {
	r := rand.New(rand.NewPCG(seed, 0xbe4c4))
	out := make([]op, 0, n)
	for i := 0; len(out) < n; i++ {
		req := w.menu(r, i)
		req.At = genesis.Add(time.Duration(len(out)+1) * step)
		out = append(out, op{req: req})
		if req.ID != "" && len(out) < n {
			out = append(out, op{approve: true, req: lineage.Request{ID: req.ID, At: genesis.Add(time.Duration(len(out)+1) * step)}})
		}
	}
	return out
}

// check refuses sizes a run cannot use; zero means the default.
func (o *Options) check() error {
	switch {
	case o.Agents < 0, o.FileAgents < 0, o.Requests < 0, o.LongLog < 0, o.IdleAgents < 0:
		return fmt.Errorf("bench: sizes must not be negative (agents %d, file agents %d, requests %d, long log %d, idle agents %d)",
			o.Agents, o.FileAgents, o.Requests, o.LongLog, o.IdleAgents)
	case o.IdleAgents == 1:
		return fmt.Errorf("bench: --idle-agents must be at least 2 (one agent prepares the policy outside the measurement)")
	}
	switch o.Store {
	case "", "memory", "file", "both":
	default:
		return fmt.Errorf("bench: unknown store %q (want memory, file or both)", o.Store)
	}
	return nil
}

func (o *Options) defaults() {
	if o.Agents == 0 {
		o.Agents = 1000
	}
	if o.FileAgents == 0 {
		o.FileAgents = 100
	}
	if o.Requests == 0 {
		o.Requests = 200
	}
	if o.Store == "" {
		o.Store = "both"
	}
	if o.IdleAgents == 0 {
		o.IdleAgents = 10000
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Run measures everything Options asks for.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	o.defaults()
	ws, err := workloads()
	if err != nil {
		return nil, err
	}
	res := &Result{GOMAXPROCS: goruntime.GOMAXPROCS(0), GOGC: os.Getenv("GOGC")}
	if res.GOGC == "" {
		res.GOGC = "100 (default)"
	}
	say := func(format string, a ...any) { fmt.Fprintf(o.Progress, "bench: "+format+"\n", a...) }

	// The same agents and ops feed every path.
	newRuns := func(n int) []*agentRun {
		runs := make([]*agentRun, n)
		for i := range runs {
			w := ws[i%len(ws)]
			runs[i] = &agentRun{w: w, ops: w.ops(uint64(i), o.Requests)}
		}
		return runs
	}
	agents := newRuns(o.Agents)

	// (c) runtime, memory store, and (b) OPA alone, paired. Latency: one
	// goroutine runs every agent's decisions (interleaved, so consecutive
	// decisions are of different policies); after each decision, the same
	// prepared query evaluates the input the runtime built for the decision
	// before it, timed on its own. So every evaluation, the runtime's and the
	// raw one, follows an evaluation of another policy: both meet the same
	// heap and equally warm caches, and their ratio is the cost of the
	// bookkeeping. Throughput: a fresh runtime on GOMAXPROCS goroutines.
	say("runtime, memory store, and raw OPA on the same inputs, latency: %d agents × %d decisions on one goroutine", o.Agents, o.Requests)
	floor, err := newRawOPA(ctx, ws)
	if err != nil {
		return nil, err
	}
	var last, prev recordedInput // last is set by the runtime's OnDecision, on the one goroutine
	rt := runtime.Open(memory.New(), runtime.Options{OnDecision: func(digest string, in ast.Value) {
		last = recordedInput{digest, in}
	}})
	ids := make([]string, len(agents))
	for i, a := range agents {
		if ids[i], err = rt.CreateAgent(ctx, a.w.compiled, runtime.CreateOptions{At: genesis}); err != nil {
			return nil, err
		}
	}
	mix := Mix{Reasons: map[string]int{}}
	byPolicy := map[string][]time.Duration{}
	var lat, raw []time.Duration // drive's own timing would include the raw evaluation
	rawByPolicy := map[string][]time.Duration{}
	var sample []recordedInput // every 10th input, for OPA's throughput
	evalRaw := func(in recordedInput) error {
		rd, err := floor.eval(ctx, in)
		if err != nil {
			return err
		}
		raw = append(raw, rd)
		rawByPolicy[floor.names[in.digest]] = append(rawByPolicy[floor.names[in.digest]], rd)
		if len(raw)%10 == 0 {
			sample = append(sample, in)
		}
		return nil
	}
	_, _, err = drive(ctx, len(agents), 1, func(i, k int) (lineage.Verdict, error) {
		last = recordedInput{}
		t0 := time.Now()
		v, err := decideOne(ctx, rt, ids[i], agents[i], k)
		d := time.Since(t0)
		lat = append(lat, d)
		byPolicy[agents[i].w.name] = append(byPolicy[agents[i].w.name], d)
		if err != nil || last.input == nil {
			return v, err
		}
		if prev.input != nil {
			if err := evalRaw(prev); err != nil {
				return v, err
			}
		}
		prev = last
		return v, nil
	}, o.Requests, func(v lineage.Verdict) { mix.count(v) })
	if err == nil && prev.input != nil {
		err = evalRaw(prev)
	}
	if err != nil {
		return nil, err
	}
	res.Workload = mix
	res.RuntimeMemP50, res.RuntimeMemP99 = percentile(lat, 50), percentile(lat, 99)
	res.RawOPAP50, res.RawOPAP99 = percentile(raw, 50), percentile(raw, 99)
	res.RuntimeMemOverRawOPA = float64(res.RuntimeMemP50) / float64(res.RawOPAP50)
	res.PerPolicy = map[string]PolicyLatency{}
	for _, w := range ws {
		pl := PolicyLatency{RawOPAP50: percentile(rawByPolicy[w.name], 50), RuntimeMemP50: percentile(byPolicy[w.name], 50)}
		if pl.RawOPAP50 > 0 {
			pl.Ratio = float64(pl.RuntimeMemP50) / float64(pl.RawOPAP50)
		}
		res.PerPolicy[w.name] = pl
	}
	say("runtime, memory store: p50 %s, p99 %s; raw OPA: p50 %s, p99 %s", time.Duration(res.RuntimeMemP50), time.Duration(res.RuntimeMemP99),
		time.Duration(res.RawOPAP50), time.Duration(res.RawOPAP99))

	say("raw OPA, throughput: %d sampled inputs × 10 on %d goroutines", len(sample), res.GOMAXPROCS)
	if res.RawOPAPerSec, err = floor.throughput(ctx, sample, 10, res.GOMAXPROCS); err != nil {
		return nil, err
	}
	sample = nil
	say("raw OPA: %.0f evaluations/s", res.RawOPAPerSec)

	say("runtime, memory store, throughput: %d agents × %d decisions on %d goroutines", o.Agents, o.Requests, res.GOMAXPROCS)
	trt := runtime.Open(memory.New(), runtime.Options{})
	truns := newRuns(o.Agents)
	tids := make([]string, len(truns))
	for i, a := range truns {
		if tids[i], err = trt.CreateAgent(ctx, a.w.compiled, runtime.CreateOptions{At: genesis}); err != nil {
			return nil, err
		}
	}
	tlat, wall, err := drive(ctx, len(truns), res.GOMAXPROCS, func(i, k int) (lineage.Verdict, error) {
		return decideOne(ctx, trt, tids[i], truns[i], k)
	}, o.Requests, nil)
	if err != nil {
		return nil, err
	}
	res.RuntimeMemPerSec = float64(len(tlat)) / wall.Seconds()
	say("runtime, memory store: %.0f decisions/s", res.RuntimeMemPerSec)

	// (a) the reference model on the same ops (it runs no Rego: extension agents are left out).
	say("reference model")
	var orc []time.Duration
	for i, a := range newRuns(o.Agents) {
		if len(a.w.compiled.Policy.Rego) > 0 {
			continue
		}
		m, err := model.New(ids[i], a.w.compiled.Policy, genesis)
		if err != nil {
			return nil, err
		}
		for k := range a.ops {
			o := a.next(k)
			var v lineage.Verdict
			start := time.Now()
			if o.approve {
				v, err = m.Approve(o.req.ID, "bench", o.req.At)
			} else {
				v, err = m.Request(o.req)
			}
			orc = append(orc, time.Since(start))
			if err != nil {
				return nil, fmt.Errorf("model: %w", err)
			}
			a.saw(o, v)
		}
	}
	res.OracleP50 = percentile(orc, 50)

	// (d) runtime, file store, fsync'd: one goroutine per agent so that group commit can work.
	if o.Store == "file" || o.Store == "both" {
		dir := o.Dir
		if dir == "" {
			if dir, err = os.MkdirTemp("", "lineage-bench-"); err != nil {
				return nil, err
			}
			defer os.RemoveAll(dir)
		}
		say("runtime, file store in %s: %d concurrent agents × %d decisions", dir, o.FileAgents, o.Requests)
		fs, err := file.Open(dir, file.Options{})
		if err != nil {
			return nil, err
		}
		frt := runtime.Open(fs, runtime.Options{})
		fruns := newRuns(o.FileAgents)
		fids := make([]string, o.FileAgents)
		for i := range fids {
			if fids[i], err = frt.CreateAgent(ctx, fruns[i].w.compiled, runtime.CreateOptions{At: genesis}); err != nil {
				return nil, err
			}
		}
		before := fs.CommitStats()
		flat, fwall, err := drive(ctx, o.FileAgents, o.FileAgents, func(i, k int) (lineage.Verdict, error) {
			return decideOne(ctx, frt, fids[i], fruns[i], k)
		}, o.Requests, nil)
		if err != nil {
			return nil, err
		}
		// The sync percentiles cover the store's life (the creates too); the
		// batch size covers the run.
		cs := fs.CommitStats()
		res.FileSyncMode = fs.SyncMode().String()
		res.FileSyncP50, res.FileSyncP99 = int64(cs.SyncP50), int64(cs.SyncP99)
		if n := cs.Syncs - before.Syncs; n > 0 {
			res.FileAppendsPerSync = float64(cs.Appends-before.Appends) / float64(n)
		}
		res.RuntimeFileP50, res.RuntimeFileP99 = percentile(flat, 50), percentile(flat, 99)
		res.RuntimeFilePerSec = float64(len(flat)) / fwall.Seconds()
		say("runtime, file store: p50 %s, p99 %s, %.0f durable decisions/s; one sync: p50 %s, p99 %s; %.1f appends per sync",
			time.Duration(res.RuntimeFileP50), time.Duration(res.RuntimeFileP99), res.RuntimeFilePerSec,
			time.Duration(res.FileSyncP50), time.Duration(res.FileSyncP99), res.FileAppendsPerSync)
		if err := fs.Close(); err != nil {
			return nil, err
		}
	}

	say("state size of %d idle agents", o.IdleAgents)
	if res.StateBytesPerAgent, err = idleStateBytes(ctx, ws[0].compiled, o.IdleAgents); err != nil {
		return nil, err
	}

	if o.LongLog > 0 {
		if err := longLog(ctx, ws[0], o.LongLog, res, say); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func (m *Mix) count(v lineage.Verdict) {
	m.Decisions++
	switch v.Decision {
	case lineage.Allow:
		m.Allowed++
	case lineage.Pending:
		m.Pending++
	default:
		m.Denied++
		m.Reasons[v.Reason]++
	}
}

func decideOne(ctx context.Context, rt *runtime.Runtime, agent string, a *agentRun, k int) (v lineage.Verdict, err error) {
	o := a.next(k)
	if o.approve {
		v, err = rt.Approve(ctx, agent, runtime.Approval{RequestID: o.req.ID, By: "bench", At: o.req.At})
	} else {
		v, err = rt.Request(ctx, agent, o.req)
	}
	a.saw(o, v)
	return v, err
}
