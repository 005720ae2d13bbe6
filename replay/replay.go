// Package replay owns shadow mode (docs/history.md): re-deciding a recorded log's
// requests under another policy and reporting where the verdicts differ.
//
// It has no rules of its own. Replay opens a runtime over a memory store with
// a clock held at each recorded time, creates the agent again (same id, name,
// parent and genesis time) under the new compiled policy, and feeds it the
// log's requests, approvals, rejections and kills in order, at their recorded
// times: the verdicts are the runtime's, decided by the same compiled Rego and
// OPA query as in production. Terminations that a verdict caused are not fed
// (the new policy causes its own); kills are. The package reads records, never
// the caller's store, and changes nothing.
package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"sync"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
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
	// Head is the head of the replayed log; it equals RecordedHead exactly
	// when the new policy wrote the same log.
	Head         string  `json:"head"`
	RecordedHead string  `json:"recorded_head"`
	Summary      Summary `json:"summary"`
	// Events lists the acts that differ, in log order (all acts with All).
	Events []Event `json:"events"`
}

// Options tune a replay.
type Options struct {
	// All keeps every act in Report.Events, not only those that differ.
	All bool
}

// Run replays a verified log (the runtime's Records or VerifyLines) under
// the compiled policy c. To replay many logs under one policy, use New: it
// prepares the policy's query once.
func Run(ctx context.Context, recs []lineage.Record, c *policy.Compiled, o Options) (*Report, error) {
	return New(c).Run(ctx, recs, o)
}

// Replayer replays logs under one compiled policy, one log at a time (Run
// calls are serialized).
type Replayer struct {
	mu  sync.Mutex
	c   *policy.Compiled
	st  *scratch
	rt  *runtime.Runtime
	now time.Time
	id  string
}

// New makes a Replayer for the compiled policy c.
func New(c *policy.Compiled) *Replayer {
	p := &Replayer{c: c, st: &scratch{}}
	p.rt = runtime.Open(p.st, runtime.Options{
		Clock:      func() time.Time { return p.now },
		NewAgentID: func() string { return p.id },
	})
	return p
}

// Run replays a verified log under the Replayer's policy.
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
	p.mu.Lock()
	defer p.mu.Unlock()
	// The agent is created again under its own id, so that a replay under the
	// recorded policy writes the recorded log byte for byte.
	p.id, p.now = g.Agent, recs[0].At.Time
	rt, c, now := p.rt, p.c, &p.now
	agent, err := rt.CreateAgent(ctx, c, runtime.CreateOptions{Name: g.Name, Parent: g.Parent, At: *now})
	if err != nil {
		return nil, fmt.Errorf("replay: creating agent %s under the new policy: %w", g.Agent, err)
	}
	rep := &Report{Agent: g.Agent, RecordedPolicy: pb.Digest, Policy: c.Digest, RecordedHead: recs[len(recs)-1].Hash,
		Summary: Summary{Changes: map[string]int{}}}
	// outcome of each request (by recorded id): recorded and replayed.
	type outcome struct {
		tool               string
		recorded, replayed lineage.Verdict
	}
	outcomes := map[string]*outcome{}
	var order []string
	ids := map[string]string{} // recorded assigned id → the replay's
	acts, stop := decodeAll(recs[2:])
	defer stop()
	for a := range acts {
		if a.err != nil {
			return nil, a.err
		}
		rec := a.rec
		*now = rec.At.Time
		ev := Event{Seq: rec.Seq, At: rec.At}
		switch rec.Kind {
		case lineage.KindAction:
			b := a.action
			ev.Kind, ev.RequestID, ev.Tool, ev.Recorded = "request", b.Request.ID, b.Request.Tool, &b.Verdict
			req := lineage.Request{ID: b.Request.ID, Tool: b.Request.Tool, Args: a.args, At: *now}
			// An id the runtime assigned (req_<seq>, D17) is reserved: the
			// replay asks without one, and approvals follow the id the replay
			// got (seqs move when the new policy refuses an approval: it
			// appends nothing there).
			assigned := b.Request.ID == "req_"+strconv.FormatUint(rec.Seq, 10)
			if assigned {
				req.ID = ""
			}
			v, rerr := rt.Request(ctx, agent, req)
			if rerr != nil {
				return nil, fmt.Errorf("replay: seq %d: request %q: %w", rec.Seq, b.Request.ID, rerr)
			}
			if assigned {
				ids[b.Request.ID] = v.RequestID
			}
			ev.Replayed = &v
			outcomes[b.Request.ID] = &outcome{tool: b.Request.Tool, recorded: b.Verdict, replayed: v}
			order = append(order, b.Request.ID)
		case lineage.KindApproval:
			b := a.approval
			ev.Kind, ev.RequestID, ev.By, ev.Recorded = "reject", b.RequestID, b.Approver, &b.Verdict
			id := b.RequestID
			if mapped, ok := ids[id]; ok {
				id = mapped
			}
			ap := runtime.Approval{RequestID: id, By: b.Approver, At: *now}
			var v lineage.Verdict
			var aerr error
			if b.Approved {
				ev.Kind = "approve"
				v, aerr = rt.Approve(ctx, agent, ap)
			} else {
				v, aerr = rt.Reject(ctx, agent, ap)
			}
			if o := outcomes[b.RequestID]; o != nil {
				ev.Tool = o.tool
				o.recorded = b.Verdict
				if aerr == nil {
					o.replayed = v
				}
			}
			switch {
			case aerr == nil:
				ev.Replayed = &v
			case errors.Is(aerr, lineage.ErrNotPending):
				ev.Note = "the new policy did not leave this request pending"
			case errors.Is(aerr, lineage.ErrSealed):
				ev.Note = "the new policy had already terminated the agent"
			default:
				return nil, fmt.Errorf("replay: seq %d: %s of %q: %w", rec.Seq, ev.Kind, b.RequestID, aerr)
			}
		case lineage.KindTermination:
			b := a.termination
			if b.Reason != lineage.Killed {
				continue // caused by the verdict before it; the new policy causes its own
			}
			ev.Kind, ev.By = "kill", b.By
			if _, kerr := rt.Terminate(ctx, agent, runtime.Kill{By: b.By, Note: b.Note, At: *now}); kerr != nil {
				if !errors.Is(kerr, lineage.ErrSealed) {
					return nil, fmt.Errorf("replay: seq %d: kill: %w", rec.Seq, kerr)
				}
				ev.Note = "the new policy had already terminated the agent"
			}
		default:
			return nil, fmt.Errorf("%w: seq %d: a %s record after the policy", ErrBadLog, rec.Seq, rec.Kind)
		}
		ev.Differ = ev.Note != "" || ev.Recorded != nil && ev.Replayed != nil && !Same(*ev.Recorded, *ev.Replayed)
		if ev.Differ {
			rep.Summary.DifferentActs++
		}
		if ev.Differ || o.All {
			rep.Events = append(rep.Events, ev)
		}
	}
	for _, id := range order {
		o := outcomes[id]
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
	st, err := rt.State(ctx, agent)
	if err != nil {
		return nil, err
	}
	rep.Head = st.Head
	return rep, nil
}

// Same says whether two verdicts agree on everything but where they were
// recorded: decision, reason, cost, scar and termination (D85).
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
	args        map[string]any
	approval    *lineage.ApprovalBody
	termination *lineage.TerminationBody
	err         error // the record does not decode; the last act
}

// decodeAll decodes records on a goroutine of its own, a batch ahead of
// the replay: decoding is a fifth of a replay's work, and on more than one
// core it then costs no time. stop ends the goroutine early.
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
		} else if a.args, err = args(a.action.Request.Args); err != nil {
			a.err = fmt.Errorf("%w: seq %d: args: %v", ErrBadLog, rec.Seq, err)
		}
	case lineage.KindApproval:
		a.approval = &lineage.ApprovalBody{}
		a.err = decode(rec, a.approval)
	case lineage.KindTermination:
		a.termination = &lineage.TerminationBody{}
		a.err = decode(rec, a.termination)
	}
	return a
}

// actionBody is an action record's body with its args left raw. Bodies are
// most of a log: goccy/go-json (a drop-in for encoding/json) decodes them
// twice as fast, as the runtime's own replay does; every number in them
// outside args is an integer.
type actionBody struct {
	Request struct {
		ID   string          `json:"id"`
		Tool string          `json:"tool"`
		Args json.RawMessage `json:"args"`
	} `json:"request"`
	Verdict lineage.Verdict `json:"verdict"`
}

// args decodes recorded args as the runtime takes them: numbers stay
// json.Number. {} (most records; also what a request without args records,
// D15) needs no decoding.
func args(raw []byte) (map[string]any, error) {
	if string(raw) == "{}" {
		return nil, nil
	}
	m := map[string]any{}
	dec := gojson.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return m, dec.Decode(&m)
}

func decode(rec lineage.Record, into any) error {
	dec := json.NewDecoder(bytes.NewReader(rec.Body))
	dec.UseNumber()
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("%w: seq %d: %s body: %v", ErrBadLog, rec.Seq, rec.Kind, err)
	}
	return nil
}

// scratch is the store under a Replayer: the length of the one log being
// replayed, and nothing else. The runtime reads a log back only when it opens
// an agent it has not cached, and a Replayer's agent is always the one it
// just created, so the records need not be kept (a replay of a long log
// then holds one copy of it, not two); Scan says so rather than answer
// wrongly. Unlike the stores of package store, Create on an agent that has a
// log starts it afresh: the Replayer creates the same agent id for every
// replay of that agent, on one runtime (one prepared query per policy), and
// the runtime then replaces its cached agent.
type scratch struct {
	mu    sync.Mutex
	agent string
	n     uint64
}

var _ store.Store = (*scratch)(nil)

func (s *scratch) Create(agent string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.agent, s.n = agent, 0
	return nil
}

func (s *scratch) Append(agent string, firstSeq uint64, recs ...[]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if agent != s.agent {
		return fmt.Errorf("%w: %s", store.ErrNotFound, agent)
	}
	if firstSeq != s.n {
		return fmt.Errorf("%w: %s: append at %d, log has %d records", store.ErrSeq, agent, firstSeq, s.n)
	}
	s.n += uint64(len(recs))
	return nil
}

func (s *scratch) Scan(agent string, fn func(seq uint64, rec []byte) error) error {
	return fmt.Errorf("replay: the scratch store keeps no records (agent %s)", agent)
}

func (s *scratch) Agents() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.agent == "" {
		return nil, nil
	}
	return []string{s.agent}, nil
}

func (s *scratch) Close() error { return nil }
