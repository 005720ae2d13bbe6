// Package replay owns shadow mode (docs/history.md): re-deciding a recorded log's
// requests under another policy and reporting where the verdicts differ.
//
// It has no rules of its own. Replay creates the agent again (same id, name,
// parent and genesis time) under the new compiled policy as a scratch agent
// of a runtime (runtime.Scratch: the runtime's decision steps, its prepared
// query of the policy and its fold, with no store), and feeds it the log's
// requests, approvals, rejections and kills in order, at their recorded
// times: the verdicts are the runtime's, decided by the same compiled Rego and
// OPA query as in production. Terminations that a verdict caused are not fed
// (the new policy causes its own); kills are. The package reads records, never
// the caller's store, and changes nothing.
package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	goruntime "runtime"
	"sync"

	gojson "github.com/goccy/go-json"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store/memory"
)

// ErrBadLog: the records are not a log replay can read (no genesis or policy
// record, a body that does not decode). Run verify on the log first.
var ErrBadLog = errors.New("bad_log")

// Event is one recorded act of the log and what the new policy made of it.
type Event struct {
	Seq       uint64       `json:"seq"` // of the recorded record
	At        lineage.Time `json:"at"`
	Kind      string       `json:"kind"` // request, approve, reject, kill
	RequestID string       `json:"request_id,omitempty"`
	Tool      string       `json:"tool,omitempty"`
	By        string       `json:"by,omitempty"`
	// Recorded is the verdict in the log; Replayed the new policy's (nil when
	// the act had none under it: see Note). Kills have neither.
	Recorded *lineage.Verdict `json:"recorded,omitempty"`
	Replayed *lineage.Verdict `json:"replayed,omitempty"`
	// Note says why an act had no verdict under the new policy (an approval
	// of a request the new policy did not leave pending, an act on an agent
	// the new policy had already terminated).
	Note   string `json:"note,omitempty"`
	Differ bool   `json:"differ"`
}

// Summary counts requests by their outcome: the verdict of their approval or
// rejection if the log has one, else the verdict of the request.
type Summary struct {
	Requests int `json:"requests"`
	// Differ counts requests whose outcome differs (decision, reason, cost,
	// scar or termination); DifferentActs counts every act that differs.
	Differ          int `json:"differ"`
	DifferentActs   int `json:"different_acts"`
	AllowedToDenied int `json:"allowed_now_denied"`
	DeniedToAllowed int `json:"denied_now_allowed"`
	// Changes counts decision changes, "allow→deny" and so on.
	Changes map[string]int `json:"changes"`
}

// Report is the outcome of a replay.
type Report struct {
	Agent          string `json:"agent"`
	RecordedPolicy string `json:"recorded_policy"` // digest
	Policy         string `json:"policy"`          // digest of the new policy
	// Head is the head of the replayed log (with Options.Head; else empty);
	// it equals RecordedHead exactly when the new policy wrote the same log.
	Head         string  `json:"head,omitempty"`
	RecordedHead string  `json:"recorded_head"`
	Summary      Summary `json:"summary"`
	// Events lists the acts that differ, in log order (all acts with All).
	Events []Event `json:"events"`
}

// Options tune a replay.
type Options struct {
	// All keeps every act in Report.Events, not only those that differ.
	All bool
	// Head computes Report.Head: every replayed record is serialized and
	// hashed as the runtime writes it (D193: the head only when asked). Without it nothing is.
	Head bool
}

// Run replays a verified log (the runtime's Records or VerifyLines) under
// the compiled policy c. To replay many logs under one policy, use New: it
// prepares the policy's query once.
func Run(ctx context.Context, recs []lineage.Record, c *policy.Compiled, o Options) (*Report, error) {
	return New(c).Run(ctx, recs, o)
}

// Replayer replays logs under one compiled policy. It is safe for concurrent
// use: each Run is a scratch agent of its own on one runtime, which prepares
// the policy's query once.
type Replayer struct {
	c  *policy.Compiled
	rt *runtime.Runtime
}

// New makes a Replayer for the compiled policy c.
func New(c *policy.Compiled) *Replayer {
	// The store is never written: scratch agents have none (D190: replay runs on a scratch agent).
	return &Replayer{c: c, rt: runtime.Open(memory.New(), runtime.Options{})}
}

// Run replays a verified log under the Replayer's policy. The log must be one
// that verify passes: an action's args are taken as the canonical JSON the
// record holds (D191: args as the record holds them).
func (p *Replayer) Run(ctx context.Context, recs []lineage.Record, o Options) (*Report, error) {
	if len(recs) < 2 || recs[0].Kind != lineage.KindGenesis || recs[1].Kind != lineage.KindPolicy {
		return nil, fmt.Errorf("%w: a log starts with genesis and policy records", ErrBadLog)
	}
	var g lineage.GenesisBody
	var pb lineage.PolicyBody
	if err := json.Unmarshal(recs[0].Body, &g); err != nil {
		return nil, fmt.Errorf("%w: seq 0: %v", ErrBadLog, err)
	}
	if err := json.Unmarshal(recs[1].Body, &pb); err != nil {
		return nil, fmt.Errorf("%w: seq 1: %v", ErrBadLog, err)
	}
	c := p.c
	// The agent is created again under its own id, so that a replay under the
	// recorded policy writes the recorded log byte for byte.
	agent, err := p.rt.NewScratch(ctx, c, g.Agent, runtime.ScratchOptions{
		CreateOptions: runtime.CreateOptions{Name: g.Name, Parent: g.Parent, At: recs[0].At.Time}, Chain: o.Head})
	if err != nil {
		return nil, fmt.Errorf("replay: creating agent %s under the new policy: %w", g.Agent, err)
	}
	rep := &Report{Agent: g.Agent, RecordedPolicy: pb.Digest, Policy: c.Digest, RecordedHead: recs[len(recs)-1].Hash,
		Summary: Summary{Changes: map[string]int{}}}
	// outcome of each request, in log order: recorded and replayed. A
	// request is found by its recorded id: an assigned one (req_<seq>) by its
	// seq in bySeq, another in byID (index + 1 into outcomes, 0 for none).
	type outcome struct {
		id, tool           string
		recorded, replayed lineage.Verdict
	}
	outcomes := make([]outcome, 0, len(recs))
	bySeq := make([]int, len(recs))
	byID := map[string]int{}
	find := func(id string) *outcome {
		i := byID[id]
		if seq, ok := runtime.AssignedSeq(id); ok && seq < uint64(len(bySeq)) && bySeq[seq] > 0 {
			i = bySeq[seq]
		}
		if i == 0 || outcomes[i-1].id != id {
			return nil
		}
		return &outcomes[i-1]
	}
	ids := map[string]string{} // recorded assigned id → the replay's, where they differ
	keep := func(ev Event, differ bool) {
		ev.Differ = differ
		if differ {
			rep.Summary.DifferentActs++
		}
		if differ || o.All {
			rep.Events = append(rep.Events, ev)
		}
	}
	acts, stop := decodeAll(recs[2:])
	defer stop()
	for a := range acts {
		if a.err != nil {
			return nil, a.err
		}
		rec := a.rec
		now := rec.At.Time
		switch rec.Kind {
		case lineage.KindAction:
			b := a.action
			if a.argsErr != nil {
				return nil, fmt.Errorf("replay: seq %d: request %q: %w", rec.Seq, b.Request.ID, a.argsErr)
			}
			req := runtime.CanonicalRequest{ID: b.Request.ID, Tool: b.Request.Tool, Args: a.args, At: now}
			// An id the runtime assigned (req_<seq>, D17 (assigned ids)) is reserved: the
			// replay asks without one, and approvals follow the id the replay
			// got (seqs move when the new policy refuses an approval: it
			// appends nothing there).
			assigned := assignedAt(b.Request.ID, rec.Seq)
			if assigned {
				req.ID = ""
			}
			v, rerr := agent.Request(ctx, req)
			if rerr != nil {
				return nil, fmt.Errorf("replay: seq %d: request %q: %w", rec.Seq, b.Request.ID, rerr)
			}
			// A terminated agent gives no id; every later approval is refused
			// as sealed whatever id it names.
			if assigned && v.RequestID != b.Request.ID && v.RequestID != "" {
				ids[b.Request.ID] = v.RequestID
			}
			outcomes = append(outcomes, outcome{id: b.Request.ID, tool: b.Request.Tool, recorded: b.Verdict, replayed: v})
			if assigned && rec.Seq < uint64(len(bySeq)) {
				bySeq[rec.Seq] = len(outcomes)
			} else {
				byID[b.Request.ID] = len(outcomes)
			}
			if differ := !Same(b.Verdict, v); differ || o.All {
				keep(Event{Seq: rec.Seq, At: rec.At, Kind: "request", RequestID: b.Request.ID, Tool: b.Request.Tool,
					Recorded: &b.Verdict, Replayed: &v}, differ)
			}
		case lineage.KindApproval:
			b := a.approval
			id := b.RequestID
			if mapped, ok := ids[id]; ok {
				id = mapped
			}
			ap := runtime.Approval{RequestID: id, By: b.Approver, At: now}
			kind := "reject"
			var v lineage.Verdict
			var aerr error
			if b.Approved {
				kind = "approve"
				v, aerr = agent.Approve(ctx, ap)
			} else {
				v, aerr = agent.Reject(ctx, ap)
			}
			var tool string
			if o := find(b.RequestID); o != nil {
				tool = o.tool
				o.recorded = b.Verdict
				if aerr == nil {
					o.replayed = v
				}
			}
			var note string
			switch {
			case aerr == nil:
			case errors.Is(aerr, lineage.ErrNotPending):
				note = "the new policy did not leave this request pending"
			case errors.Is(aerr, lineage.ErrSealed):
				note = "the new policy had already terminated the agent"
			default:
				return nil, fmt.Errorf("replay: seq %d: %s of %q: %w", rec.Seq, kind, b.RequestID, aerr)
			}
			if differ := note != "" || !Same(b.Verdict, v); differ || o.All {
				ev := Event{Seq: rec.Seq, At: rec.At, Kind: kind, RequestID: b.RequestID, Tool: tool, By: b.Approver,
					Recorded: &b.Verdict, Note: note}
				if aerr == nil {
					ev.Replayed = &v
				}
				keep(ev, differ)
			}
		case lineage.KindTermination:
			b := a.termination
			if b.Reason != lineage.Killed {
				continue // caused by the verdict before it; the new policy causes its own
			}
			ev := Event{Seq: rec.Seq, At: rec.At, Kind: "kill", By: b.By}
			if kerr := agent.Terminate(runtime.Kill{By: b.By, Note: b.Note, At: now}); kerr != nil {
				if !errors.Is(kerr, lineage.ErrSealed) {
					return nil, fmt.Errorf("replay: seq %d: kill: %w", rec.Seq, kerr)
				}
				ev.Note = "the new policy had already terminated the agent"
			}
			keep(ev, ev.Note != "")
		default:
			return nil, fmt.Errorf("%w: seq %d: a %s record after the policy", ErrBadLog, rec.Seq, rec.Kind)
		}
	}
	for _, o := range outcomes {
		rep.Summary.Requests++
		if Same(o.recorded, o.replayed) {
			continue
		}
		rep.Summary.Differ++
		from, to := o.recorded.Decision, o.replayed.Decision
		if from != to {
			rep.Summary.Changes[string(from)+"→"+string(to)]++
		}
		switch {
		case from == lineage.Allow && to == lineage.Deny:
			rep.Summary.AllowedToDenied++
		case from == lineage.Deny && to == lineage.Allow:
			rep.Summary.DeniedToAllowed++
		}
	}
	rep.Head = agent.State().Head
	return rep, nil
}

// RunAll replays several logs under the Replayer's policy, one log per core
// (GOMAXPROCS at a time, each a scratch agent on the one prepared query),
// and returns their reports in the order of logs. If replays fail, the error
// is that of the first such log, naming its index.
func (p *Replayer) RunAll(ctx context.Context, logs [][]lineage.Record, o Options) ([]*Report, error) {
	reports := make([]*Report, len(logs))
	errs := make([]error, len(logs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(goruntime.GOMAXPROCS(0), len(logs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				reports[i], errs[i] = p.Run(ctx, logs[i], o)
			}
		}()
	}
	for i := range logs {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, &LogError{Index: i, Err: err}
		}
	}
	return reports, nil
}

// LogError is RunAll's error: the first log, by its index in logs, that
// could not be replayed.
type LogError struct {
	Index int
	Err   error
}

func (e *LogError) Error() string { return fmt.Sprintf("log %d: %v", e.Index, e.Err) }

func (e *LogError) Unwrap() error { return e.Err }

// assignedAt says whether id is req_<seq>, the id the runtime assigns a
// request recorded at seq (D17: assigned ids).
func assignedAt(id string, seq uint64) bool {
	n, ok := runtime.AssignedSeq(id)
	return ok && n == seq
}

// Same says whether two verdicts agree on everything but where they were
// recorded: decision, reason, cost, scar and termination (D85: when replayed verdicts differ).
func Same(a, b lineage.Verdict) bool {
	if a.Decision != b.Decision || a.Reason != b.Reason || a.Cost != b.Cost || a.Terminated != b.Terminated {
		return false
	}
	if a.Scar == nil || b.Scar == nil {
		return a.Scar == b.Scar
	}
	return *a.Scar == *b.Scar
}

// act is one record after the policy, decoded.
type act struct {
	rec         lineage.Record
	action      *actionBody
	args        runtime.CanonicalArgs // the action's, checked
	argsErr     error                 // the runtime refuses the action's args
	approval    *lineage.ApprovalBody
	termination *lineage.TerminationBody
	err         error // the record does not decode; the last act
}

// decodeAll decodes records, and checks the actions' args, on a goroutine
// of its own, a batch ahead of the replay: on more than one core that work
// then costs the replay no time. stop ends the goroutine early.
func decodeAll(recs []lineage.Record) (acts iter.Seq[act], stop func()) {
	const batch = 256
	ch := make(chan []act, 4)
	done := make(chan struct{})
	go func() {
		defer close(ch)
		for len(recs) > 0 {
			n := min(batch, len(recs))
			out := make([]act, n)
			for i, rec := range recs[:n] {
				out[i] = decodeAct(rec)
				if out[i].err != nil {
					out = out[:i+1]
					recs = nil
					break
				}
			}
			if len(recs) > 0 {
				recs = recs[n:]
			}
			select {
			case ch <- out:
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(done)
			for range ch { // let the goroutine end
			}
		})
	}
	return func(yield func(act) bool) {
		for out := range ch {
			for _, a := range out {
				if !yield(a) {
					return
				}
			}
		}
	}, stop
}

func decodeAct(rec lineage.Record) act {
	a := act{rec: rec}
	switch rec.Kind {
	case lineage.KindAction:
		a.action = &actionBody{}
		if err := gojson.Unmarshal(rec.Body, a.action); err != nil {
			a.err = fmt.Errorf("%w: seq %d: action body: %v", ErrBadLog, rec.Seq, err)
		} else if args := a.action.Request.Args; len(args) == 0 || args[0] != '{' {
			a.err = fmt.Errorf("%w: seq %d: action body: args must be an object", ErrBadLog, rec.Seq)
		} else {
			a.args, a.argsErr = runtime.CheckArgs(args)
		}
	case lineage.KindApproval:
		a.approval = &lineage.ApprovalBody{}
		if err := gojson.Unmarshal(rec.Body, a.approval); err != nil {
			a.err = fmt.Errorf("%w: seq %d: approval body: %v", ErrBadLog, rec.Seq, err)
		}
	case lineage.KindTermination:
		a.termination = &lineage.TerminationBody{}
		if err := gojson.Unmarshal(rec.Body, a.termination); err != nil {
			a.err = fmt.Errorf("%w: seq %d: termination body: %v", ErrBadLog, rec.Seq, err)
		}
	}
	return a
}

// actionBody is an action record's body with its args left raw: the
// canonical JSON the record holds, which the runtime takes as it is. Bodies
// are most of a log: goccy/go-json (a drop-in for encoding/json) decodes
// them twice as fast, as the runtime's own replay does; every number in the
// bodies replay decodes is an integer.
type actionBody struct {
	Request struct {
		ID   string          `json:"id"`
		Tool string          `json:"tool"`
		Args json.RawMessage `json:"args"`
	} `json:"request"`
	Verdict lineage.Verdict `json:"verdict"`
}
