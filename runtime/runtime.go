package runtime

import (
	"context"

	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
	"go.opentelemetry.io/otel/trace"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime/store"
)

// Options configure a Runtime.
type Options struct {
	// Compile turns a normalized policy document (from a log's record 1) back
	// into a compiled policy when an existing agent is opened; nil means
	// compiler.CompileRecorded, the project's compiler (D405 (a nil Compile is
	// the compiler's)). The runtime calls it only to reopen a log.
	Compile func(doc []byte) (*policy.Compiled, error)
	// Clock gives the time of requests that carry none; nil means time.Now.
	Clock func() time.Time
	// NewAgentID makes agent ids; nil means "agt_" + 26 random base32 letters.
	NewAgentID func() string
	// OnDecision, if set, sees every evaluation of the verdict query (requests
	// and approvals): the policy digest and the input exactly as the query
	// received it (decision logging, benchmarks that replay the same inputs
	// against OPA alone). It runs under the agent's lock and must not change
	// the input.
	OnDecision func(digest string, input ast.Value)
	// EvalDeadline bounds each evaluation of a policy (docs/extensions.md); zero means
	// DefaultEvalDeadline (100 ms). An evaluation over it runs once more; an
	// extension over it again denies extension_error, so it holds an agent
	// for at most about twice the deadline (D34: the evaluation deadline).
	EvalDeadline time.Duration
	// MaxAgents bounds the agents held in memory: beyond it the least
	// recently used leave, and come back by replaying their logs when next
	// used. 0 means no bound.
	MaxAgents int
	// IdleTimeout unloads agents unused for that long; 0 means never.
	IdleTimeout time.Duration
	// TracerProvider, if set, gets a span for each decision, its OPA
	// evaluation and its store commit (docs/operations.md, Traces); nil
	// means none (a no-op tracer).
	TracerProvider trace.TracerProvider
}

// Runtime guards agents: it decides their requests and keeps their logs.
// It is safe for concurrent use: requests of one agent are serialized, agents
// run in parallel.
type Runtime struct {
	store   store.Store
	shared  bool // the store has other writers (store.Shared)
	opts    Options
	mu      sync.Mutex
	agents  *agentTable
	engines map[string]*engineSlot
	watch   atomic.Pointer[LogWatch] // checkpoint.go
	tracer  trace.Tracer             // trace.go
}

type engineSlot struct {
	once sync.Once
	eng  *engine
	err  error
	// compiled is set once eng is ready: the policy it was prepared for.
	compiled atomic.Pointer[policy.Compiled]
}

type agent struct {
	mu  sync.Mutex
	id  string
	f   *folded
	eng *engine
	// kept are terms of its inputs that outlive a decision (under mu).
	kept keptTerms
	// gone (under mu) says the agent left the table, evicted or dropped
	// after a failed append: its state is no longer used.
	gone bool
	slot *agentSlot // the table's slot that holds it
}

// Open starts a runtime over a store. Agents are loaded (their logs replayed
// and verified) on first use.
func Open(st store.Store, opts Options) *Runtime {
	if opts.Compile == nil {
		opts.Compile = compiler.CompileRecorded
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.NewAgentID == nil {
		opts.NewAgentID = newAgentID
	}
	r := &Runtime{store: st, shared: store.IsShared(st), opts: opts,
		agents: newAgentTable(opts.MaxAgents, opts.IdleTimeout), engines: map[string]*engineSlot{}}
	r.agents.onLeave = r.left
	r.tracer = tracerOf(opts.TracerProvider)
	return r
}

func newAgentID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return "agt_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// engineFor returns the prepared query for a compiled policy, preparing it once per digest.
func (r *Runtime) engineFor(ctx context.Context, c *policy.Compiled) (*engine, error) {
	r.mu.Lock()
	slot := r.engines[c.Digest]
	if slot == nil {
		slot = &engineSlot{}
		r.engines[c.Digest] = slot
	}
	r.mu.Unlock()
	slot.once.Do(func() {
		slot.eng, slot.err = newEngine(ctx, c, r.opts.EvalDeadline)
		if slot.err == nil {
			slot.compiled.Store(c)
		}
	})
	if slot.err != nil {
		r.mu.Lock()
		if r.engines[c.Digest] == slot {
			delete(r.engines, c.Digest) // let a later call try again
		}
		r.mu.Unlock()
	}
	return slot.eng, slot.err
}

// compileKnown compiles a policy document read from a log (Options.Compile),
// unless this runtime already prepared an engine for a policy of the same
// digest: the digest is the hash of the document's bytes, and compiling is
// deterministic, so that document compiles to its digest again (the check of
// D53 (verify runs what open runs) holds) and an agent reopened after it left the table (MaxAgents,
// IdleTimeout) costs a replay, not a compilation.
func (r *Runtime) compileKnown(doc []byte) (*policy.Compiled, error) {
	r.mu.Lock()
	slot := r.engines[hashText(doc)]
	r.mu.Unlock()
	if slot != nil {
		if c := slot.compiled.Load(); c != nil {
			return c, nil
		}
	}
	return r.opts.Compile(doc)
}

// Create options for a new agent.
type CreateOptions struct {
	Name string
	// Parent, if set, names the agent this one replaces (lineage across policy
	// changes). An empty Head is filled with the parent's current head.
	Parent *lineage.Parent
	// At is genesis time; zero means now.
	At time.Time
}

// CreateAgent starts a new agent under a compiled policy: it writes genesis
// and policy records and returns the new id.
func (r *Runtime) CreateAgent(ctx context.Context, c *policy.Compiled, o CreateOptions) (string, error) {
	if c == nil {
		return "", errors.New("no compiled policy")
	}
	eng, err := r.engineFor(ctx, c)
	if err != nil {
		return "", err
	}
	var parent *lineage.Parent
	if o.Parent != nil {
		p := *o.Parent
		if p.Head == "" {
			st, err := r.State(ctx, p.Agent)
			if err != nil {
				return "", fmt.Errorf("parent: %w", err)
			}
			p.Head = st.Head
		}
		parent = &p
	}
	at := o.At
	if at.IsZero() {
		at = r.opts.Clock()
	}
	if err := recordable(at); err != nil {
		return "", err
	}
	id := r.opts.NewAgentID()
	if err := r.store.Create(id); err != nil {
		return "", fmt.Errorf("creating agent %s: %w", id, err)
	}
	a := &agent{id: id, f: newFolded(), eng: eng}
	err = a.append(r.store, at,
		item{kind: lineage.KindGenesis, body: &lineage.GenesisBody{Agent: id, Name: o.Name, Parent: parent}},
		item{kind: lineage.KindPolicy, body: &lineage.PolicyBody{Digest: c.Digest, Policy: c.Document}},
	)
	if err != nil {
		return "", err
	}
	r.agents.put(a)
	r.grew(a)
	return id, nil
}

// Agents lists the ids of all agents in the store.
func (r *Runtime) Agents() ([]string, error) { return r.store.Agents() }

// load returns the agent, replaying and verifying its log on first use.
// The agent may leave the table (or be dropped) at any time after: callers
// lock it with acquire or view, which load again if it left.
func (r *Runtime) load(ctx context.Context, id string) (*agent, error) {
	slot := r.agents.slot(id)
	slot.once.Do(func() {
		slot.a, slot.err = r.replay(ctx, id)
		if slot.a != nil {
			slot.a.slot = slot
		}
		slot.ready.Store(true)
	})
	if slot.err != nil {
		r.agents.remove(slot) // a later call tries again (the log may be repaired)
	}
	return slot.a, slot.err
}

// replay opens an agent from its log: every record verified and folded, with
// the checks VerifyLog runs (so that verify says ok exactly when this opens).
func (r *Runtime) replay(ctx context.Context, id string) (*agent, error) {
	f := newFolded()
	fo := folder{f: f, compile: r.compileKnown}
	err := r.store.Scan(id, fo.line)
	compiled := fo.compiled
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", lineage.ErrUnknownAgent, id)
	}
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", id, err)
	}
	if compiled == nil {
		return nil, fmt.Errorf("agent %s: %w", id, &ChainError{Seq: f.seq, Reason: "log ends before its policy record"})
	}
	eng, err := r.engineFor(ctx, compiled)
	if err != nil {
		return nil, err
	}
	a := &agent{id: id, f: f, eng: eng}
	if f.owed != "" {
		// The verdict that ended the agent is durable but its termination record
		// is not (a crash between them): seal the log as the verdict said.
		// A read-only store leaves that to the next writer.
		err := a.append(r.store, f.lastAt, item{kind: lineage.KindTermination, body: &lineage.TerminationBody{Reason: f.owed}})
		if err != nil && !errors.Is(err, store.ErrReadOnly) {
			return nil, fmt.Errorf("agent %s: completing its termination: %w", id, err)
		}
	}
	return a, nil
}

// folder folds stored lines into f, one at a time, with the checks that
// opening a log runs: the record opens on the chain, kinds come in order,
// and foldChecked accepts it. Replay starts it on an empty state; a catch-up
// with another node's records starts it on the agent's state.
type folder struct {
	f        *folded
	prev     lineage.Kind // the kind of the last record folded
	compile  func(doc []byte) (*policy.Compiled, error)
	compiled *policy.Compiled // the policy record's, once folded
	scratch  []byte
	n        int // records folded
}

func (fo *folder) line(seq uint64, line []byte) error {
	rec, err := openRecordFast(line, seq, fo.f.head, &fo.scratch)
	if err != nil {
		return err
	}
	if err := kindFollows(rec, seq, fo.prev); err != nil {
		return err
	}
	c, err := foldChecked(fo.f, rec, fo.compile)
	if err != nil {
		return err
	}
	if c != nil {
		fo.compiled = c
	}
	fo.prev = rec.Kind
	fo.n++
	return nil
}

// kindFollows enforces the log's shape: genesis, policy, then actions and
// approvals, and nothing after a termination.
func kindFollows(rec lineage.Record, seq uint64, prev lineage.Kind) error {
	switch {
	case seq == 0 && rec.Kind != lineage.KindGenesis:
		return &ChainError{Seq: seq, Reason: "record 0 must be genesis"}
	case seq == 1 && rec.Kind != lineage.KindPolicy:
		return &ChainError{Seq: seq, Reason: "record 1 must be the policy"}
	case seq > 1 && (rec.Kind == lineage.KindGenesis || rec.Kind == lineage.KindPolicy):
		return &ChainError{Seq: seq, Reason: fmt.Sprintf("unexpected %s record", rec.Kind)}
	case prev == lineage.KindTermination:
		return &ChainError{Seq: seq, Reason: "record after termination: the log was sealed"}
	}
	return nil
}

type item struct {
	kind lineage.Kind
	body any
	args []byte // an action's canonical args
}

// append seals records onto the chain, makes them durable in one store append
// and only then folds them into state. On error the state is unchanged, but
// the store may hold the records (store.ErrUnavailable): the caller drops the
// agent unless the error is store.ErrSeq, which writes nothing (see update).
func (a *agent) append(st store.Store, at time.Time, items ...item) error {
	// A decision writes one record, or two with a termination.
	var recBuf [2]lineage.Record
	var lineBuf [2][]byte
	recs, lines := recBuf[:0], lineBuf[:0]
	prev := a.f.head
	first := a.f.seq + 1
	if a.f.head == "" { // a new log: genesis is seq 0
		first = 0
	}
	for i, it := range items {
		rec, line, err := sealRecord(first+uint64(i), at, it, prev)
		if err != nil {
			return fmt.Errorf("agent %s: encoding %s record: %w", a.id, it.kind, err)
		}
		recs, lines, prev = append(recs, rec), append(lines, line), rec.Hash
	}
	if err := st.Append(a.id, first, lines...); err != nil {
		return fmt.Errorf("agent %s: %w", a.id, err)
	}
	for i, rec := range recs {
		if err := a.f.fold(rec, items[i].body, items[i].args); err != nil {
			// The records are durable and valid; a fold error is a bug of ours.
			panic(fmt.Sprintf("agent %s: folding record %d: %v", a.id, rec.Seq, err))
		}
	}
	return nil
}

// Earliest and Latest bound the times the runtime takes (D50: the times the guard holds): every time it
// keeps must be exact as a record's at, in the rate window and as at_ns, int64
// nanoseconds since 1970 that are never negative. Latest is the last
// nanosecond int64 holds (2262-04-11T23:47:16.854775807Z).
var (
	Earliest = time.Unix(0, 0).UTC()
	Latest   = time.Unix(0, math.MaxInt64).UTC()
)

// recordable refuses a time outside [Earliest, Latest] (docs/decision-order.md): it is
// malformed, and nothing is recorded.
func recordable(at time.Time) error {
	if at.Before(Earliest) || at.After(Latest) {
		return badRequest("time %s is outside %s…%s, the times the guard can hold exactly (int64 nanoseconds since 1970)",
			at.UTC().Format(time.RFC3339Nano), Earliest.Format(time.RFC3339), Latest.Format(time.RFC3339Nano))
	}
	return nil
}

// timeFor resolves a request's time: the given one, which must not be earlier
// than the last record (D7: time never goes backwards), or the clock, held at the last record's time if
// the clock stepped back.
func (r *Runtime) timeFor(a *agent, at time.Time) (time.Time, error) {
	if at.IsZero() {
		now := r.opts.Clock()
		if now.Before(a.f.lastAt) {
			now = a.f.lastAt
		}
		return now, recordable(now)
	}
	if err := recordable(at); err != nil {
		return time.Time{}, err
	}
	if at.Before(a.f.lastAt) {
		return time.Time{}, fmt.Errorf("%w: %s is earlier than the log's last record (%s)",
			lineage.ErrTimeBackwards, at.UTC().Format(time.RFC3339Nano), a.f.lastAt.UTC().Format(time.RFC3339Nano))
	}
	return at, nil
}

// Request decides one request of an agent (docs/decision-order.md) and records it.
// Denials are verdicts, not errors; an error means nothing was recorded.
func (r *Runtime) Request(ctx context.Context, agentID string, req lineage.Request) (lineage.Verdict, error) {
	if err := checkNewID(req.ID); err != nil {
		return lineage.Verdict{}, err
	}
	cr, err := checkRequest(req)
	if err != nil {
		return lineage.Verdict{}, err
	}
	if !req.At.IsZero() {
		if err := recordable(req.At); err != nil {
			return lineage.Verdict{}, err
		}
	}
	ctx, span := r.startDecision(ctx, agentID, cr.tool)
	v, err := r.update(ctx, agentID, func(a *agent) (outcome, error) {
		return r.request(ctx, a, cr, req.At)
	}, nil)
	endDecision(span, v, err)
	return v, err
}

// request decides a checked request on a's state (a is locked): the verdict
// and the records that make it durable, none for a retry or a refusal that
// is not recorded.
func (r *Runtime) request(ctx context.Context, a *agent, cr *checkedRequest, reqAt time.Time) (outcome, error) {
	// Step 1, right after the malformed check and before any time check: an
	// exact retry is answered whatever its at, and records nothing.
	if cr.id != "" {
		if seen, ok := a.f.lookup(cr.id); ok {
			if seen.fingerprint != fingerprint(cr.tool, cr.canonArgs) {
				return outcome{}, fmt.Errorf("%w: request id %q was used before with another tool or other args", lineage.ErrIDConflict, cr.id)
			}
			if seen.verdict.Decision == lineage.Pending && a.f.status == lineage.Terminated {
				// Still pending when the agent was terminated: void (D51: retries come before time checks; void pending answers terminated).
				return outcome{verdict: lineage.Verdict{Decision: lineage.Deny, Reason: "terminated", RequestID: cr.id}}, nil
			}
			return outcome{verdict: seen.verdict}, nil
		}
		if reservedID(cr.id) {
			return outcome{}, badRequest("id %q has the form req_<n>, which is reserved for the ids the runtime assigns", cr.id)
		}
	}
	at, err := r.timeFor(a, reqAt)
	if err != nil {
		return outcome{}, err
	}
	// Step 2: a sealed log takes nothing more (D4: refusals that are not recorded).
	if a.f.status == lineage.Terminated {
		return outcome{verdict: lineage.Verdict{Decision: lineage.Deny, Reason: "terminated", RequestID: cr.id}}, nil
	}
	seq := a.f.seq + 1
	id := cr.id
	if id == "" {
		id = "req_" + strconv.FormatUint(seq, 10) // unique: callers cannot use this form (D17: assigned ids)
	}
	in, err := a.eng.input(modeRequest, id, cr.tool, cr, at, a.f, &a.kept)
	if err != nil {
		return outcome{}, err
	}
	d, err := r.decide(ctx, a, modeRequest, in)
	if err != nil {
		return outcome{}, fmt.Errorf("agent %s: %w", a.id, err)
	}
	v := verdictOf(d, id, seq)
	recorded := lineage.RecordedRequest{ID: id, Tool: cr.tool}
	if v.Decision == lineage.Pending { // the state keeps pending requests whole
		if recorded.Args, err = cr.argsMap(); err != nil {
			return outcome{}, err
		}
	}
	items := []item{{kind: lineage.KindAction, body: &lineage.ActionBody{Request: recorded, Verdict: v}, args: cr.canonArgs}}
	if v.Terminated != "" {
		items = append(items, item{kind: lineage.KindTermination, body: &lineage.TerminationBody{Reason: v.Terminated}})
	}
	return outcome{verdict: v, at: at, items: items}, nil
}

func (r *Runtime) decide(ctx context.Context, a *agent, m mode, in ast.Value) (decision, error) {
	if r.opts.OnDecision != nil && m != modeReject {
		r.opts.OnDecision(a.eng.compiled.Digest, in)
	}
	ctx, span := r.start(ctx, SpanEval)
	d, err := a.eng.decide(ctx, m, in)
	endSpan(span, err)
	return d, err
}

func verdictOf(d decision, requestID string, seq uint64) lineage.Verdict {
	v := lineage.Verdict{Decision: d.decision, Reason: d.reason, Cost: d.cost,
		Terminated: d.terminated, RequestID: requestID, Seq: seq}
	if d.scar != "" {
		v.Scar = &lineage.Scar{Severity: d.scar, Weight: d.weight}
	}
	return v
}

// Approval names a pending request and the person or service deciding it.
type Approval struct {
	RequestID string
	By        string
	At        time.Time // zero: now
	// Note is the approver's note, kept in the approval record: at most
	// MaxNote characters of valid UTF-8 ("" for none).
	Note string
}

// MaxNote is the most characters an approval's note has (docs/approvals.md).
const MaxNote = 256

// CheckNote says what is wrong with an approval's note, if anything (the
// runtime refuses such an approval as lineage.ErrBadRequest).
func CheckNote(note string) error {
	if !utf8.ValidString(note) {
		return errors.New("/note: not valid UTF-8")
	}
	if n := utf8.RuneCountInString(note); n > MaxNote {
		return fmt.Errorf("/note: %d characters, over the limit of %d", n, MaxNote)
	}
	return nil
}

// Approve allows a pending request if docs/decision-order.md steps 3–7 still pass now (docs/approvals.md).
func (r *Runtime) Approve(ctx context.Context, agentID string, ap Approval) (lineage.Verdict, error) {
	return r.decidePending(ctx, agentID, ap, modeApprove)
}

// Reject denies a pending request (approval_rejected, no scar).
func (r *Runtime) Reject(ctx context.Context, agentID string, ap Approval) (lineage.Verdict, error) {
	return r.decidePending(ctx, agentID, ap, modeReject)
}

func (r *Runtime) decidePending(ctx context.Context, agentID string, ap Approval, m mode) (lineage.Verdict, error) {
	ctx, span := r.startDecision(ctx, agentID, "")
	v, err := r.update(ctx, agentID, func(a *agent) (outcome, error) {
		return r.pending(ctx, a, ap, m)
	}, nil)
	endDecision(span, v, err)
	return v, err
}

// pending decides an approval or a rejection on a's state (a is locked): the
// verdict and the records that make it durable.
func (r *Runtime) pending(ctx context.Context, a *agent, ap Approval, m mode) (outcome, error) {
	if err := checkActor("approver", ap.By, a); err != nil {
		return outcome{}, err
	}
	if err := CheckNote(ap.Note); err != nil {
		return outcome{}, fmt.Errorf("%w: %w", lineage.ErrBadRequest, err)
	}
	at, err := r.timeFor(a, ap.At)
	if err != nil {
		return outcome{}, err
	}
	if a.f.status == lineage.Terminated {
		return outcome{}, fmt.Errorf("%w: agent %s is terminated; its pending requests are void", lineage.ErrSealed, a.id)
	}
	req, ok := a.f.pending[ap.RequestID]
	if !ok {
		if _, known := a.f.lookup(ap.RequestID); !known {
			// Both sentinels: not pending, as ever, and never made, which the
			// service answers 404: D303 (approving a request never made).
			return outcome{}, fmt.Errorf("%w: agent %s has no request %q, so it is not pending (%w)", lineage.ErrUnknownRequest, a.id, ap.RequestID, lineage.ErrNotPending)
		}
		return outcome{}, fmt.Errorf("%w: request %q of agent %s is not pending", lineage.ErrNotPending, ap.RequestID, a.id)
	}
	cr, err := checkRequest(lineage.Request{ID: req.ID, Tool: req.Tool, Args: req.Args})
	if err != nil {
		return outcome{}, fmt.Errorf("agent %s: pending request %q: %w", a.id, req.ID, err)
	}
	setTool(ctx, req.Tool)
	in, err := a.eng.input(m, req.ID, req.Tool, cr, at, a.f, &a.kept)
	if err != nil {
		return outcome{}, err
	}
	d, err := r.decide(ctx, a, m, in)
	if err != nil {
		return outcome{}, fmt.Errorf("agent %s: %w", a.id, err)
	}
	v := verdictOf(d, req.ID, a.f.seq+1)
	items := []item{{kind: lineage.KindApproval, body: &lineage.ApprovalBody{
		RequestID: req.ID, Approver: ap.By, Approved: m == modeApprove, Verdict: v, Note: ap.Note,
	}}}
	if v.Terminated != "" {
		items = append(items, item{kind: lineage.KindTermination, body: &lineage.TerminationBody{Reason: v.Terminated}})
	}
	v.Note = ap.Note // the answer's, not the recorded verdict's
	return outcome{verdict: v, at: at, items: items}, nil
}

// Kill is a request to terminate an agent (the kill switch).
type Kill struct {
	By   string
	Note string // free text kept in the termination record
	At   time.Time
}

// Terminate appends a termination record "killed" and seals the log.
func (r *Runtime) Terminate(ctx context.Context, agentID string, k Kill) (lineage.State, error) {
	var st lineage.State
	_, err := r.update(ctx, agentID, func(a *agent) (outcome, error) {
		return r.kill(a, k)
	}, func(a *agent) { st = a.f.State() })
	if err != nil {
		return lineage.State{}, err
	}
	return st, nil
}

// kill checks a kill on a's state (a is locked) and returns its termination record.
func (r *Runtime) kill(a *agent, k Kill) (outcome, error) {
	if err := checkActor("terminate --by", k.By, a); err != nil {
		return outcome{}, fmt.Errorf("%w: %w", lineage.ErrBadRequest, err)
	}
	at, err := r.timeFor(a, k.At)
	if err != nil {
		return outcome{}, err
	}
	if a.f.status == lineage.Terminated {
		return outcome{}, fmt.Errorf("%w: agent %s is already terminated (%s)", lineage.ErrSealed, a.id, a.f.termination)
	}
	return outcome{at: at, items: []item{{kind: lineage.KindTermination,
		body: &lineage.TerminationBody{Reason: lineage.Killed, By: k.By, Note: k.Note}}}}, nil
}

// State returns an agent's folded state (docs/decision-order.md#folded-state).
func (r *Runtime) State(ctx context.Context, agentID string) (lineage.State, error) {
	a, err := r.view(ctx, agentID)
	if err != nil {
		return lineage.State{}, err
	}
	defer a.mu.Unlock()
	return a.f.State(), nil
}

// Records reads an agent's whole log from the store, verifying it as VerifyLog
// does with the runtime's compiler: it fails exactly when opening the agent would.
func (r *Runtime) Records(agentID string) ([]lineage.Record, error) {
	recs, err := VerifyLog(func(fn func(uint64, []byte) error) error { return r.store.Scan(agentID, fn) }, r.opts.Compile)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", lineage.ErrUnknownAgent, agentID)
	}
	return recs, err
}

// Verify recomputes an agent's chain from the store; a *ChainError names the first bad seq.
func (r *Runtime) Verify(agentID string) error {
	_, err := r.Records(agentID)
	return err
}
