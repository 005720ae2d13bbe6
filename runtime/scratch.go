package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/policy"
)

// Scratch is an agent on no store, for replay (package replay, D190 (replay runs on a scratch agent)): its
// acts are decided exactly as the runtime decides any agent's (the same
// decision steps, the compiled policy's prepared query of this runtime's
// engine) and its records folded by the one fold, but nothing is written,
// and a request's args come already in canonical JSON, as a verified log
// holds them, so they are decoded only when the policy reads them. With
// Chain, the records are sealed as an append seals them, and the state's
// head is the head of the log the agent would have written; without, nothing
// is serialized or hashed and the head stays empty. A Scratch is used by one
// goroutine at a time; scratch agents of one runtime run in parallel.
type Scratch struct {
	r     *Runtime
	a     *agent
	chain bool
	next  uint64 // the seq of the next record
}

// ScratchOptions are a scratch agent's CreateOptions, and whether its records
// are sealed onto a hash chain.
type ScratchOptions struct {
	CreateOptions
	Chain bool
}

// NewScratch starts a scratch agent with the given id under c: its genesis
// and policy records are folded as CreateAgent writes them. A parent must
// carry its head (there is no store to read it from); o.At zero means now.
func (r *Runtime) NewScratch(ctx context.Context, c *policy.Compiled, id string, o ScratchOptions) (*Scratch, error) {
	if c == nil {
		return nil, errors.New("no compiled policy")
	}
	if o.Parent != nil && o.Parent.Head == "" {
		return nil, fmt.Errorf("%w: scratch agent %s: the parent %s has no head", lineage.ErrBadRequest, id, o.Parent.Agent)
	}
	eng, err := r.engineFor(ctx, c)
	if err != nil {
		return nil, err
	}
	at := o.At
	if at.IsZero() {
		at = r.opts.Clock()
	}
	if err := recordable(at); err != nil {
		return nil, err
	}
	s := &Scratch{r: r, a: &agent{id: id, f: newFolded(), eng: eng}, chain: o.Chain}
	err = s.commit(at, []item{
		{kind: lineage.KindGenesis, body: &lineage.GenesisBody{Agent: id, Name: o.Name, Parent: o.Parent}},
		{kind: lineage.KindPolicy, body: &lineage.PolicyBody{Digest: c.Digest, Policy: c.Document}},
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// CanonicalRequest is a request whose args are the canonical JSON (RFC 8785)
// of an object, as a log records them, checked; zero Args means none ({}).
type CanonicalRequest struct {
	ID   string
	Tool string
	Args CanonicalArgs
	At   time.Time
}

// CanonicalArgs are a request's args as JSON that CheckArgs accepted.
type CanonicalArgs struct{ b []byte }

// CheckArgs checks a request's args given as JSON, as a log records them:
// exactly what checkRequest accepts once they are decoded (checkArgsJSON).
// It reads nothing but b, so a replay checks the next records' args while
// the runtime decides (D192: the args checks, by a scan). nil means none ({}); b is kept, not copied.
func CheckArgs(b []byte) (CanonicalArgs, error) {
	if b == nil || string(b) == "{}" {
		return CanonicalArgs{}, nil
	}
	if err := checkArgsJSON(b); err != nil {
		return CanonicalArgs{}, err
	}
	return CanonicalArgs{b}, nil
}

// Request decides a request as Runtime.Request does and folds its records.
func (s *Scratch) Request(ctx context.Context, req CanonicalRequest) (lineage.Verdict, error) {
	cr, err := s.checkCanonical(req)
	if err != nil {
		return lineage.Verdict{}, err
	}
	o, err := s.r.request(ctx, s.a, cr, req.At)
	if err != nil {
		return lineage.Verdict{}, err
	}
	return o.verdict, s.commit(o.at, o.items)
}

// checkCanonical is checkRequest for checked canonical args: the same checks
// of the id, the tool and the size, without decoding the args unless the
// policy reads them (its CEL or extensions).
func (s *Scratch) checkCanonical(req CanonicalRequest) (*checkedRequest, error) {
	if err := checkIDTool(req.ID, req.Tool); err != nil {
		return nil, err
	}
	args := req.Args.b
	if args == nil {
		return &checkedRequest{id: req.ID, tool: req.Tool, canonArgs: emptyObject, argsValue: emptyArgs}, nil
	}
	if n := len(args) + len(req.ID) + len(req.Tool); n > MaxRequestBytes {
		return nil, badRequest("request is %d bytes, over the limit of %d", n, MaxRequestBytes)
	}
	cr := &checkedRequest{id: req.ID, tool: req.Tool, canonArgs: args}
	if s.a.eng.reads.All || s.a.eng.reads.Args {
		if _, err := cr.argsMap(); err != nil {
			return nil, err
		}
	}
	return cr, nil
}

// checkArgsJSON accepts exactly the args, given as JSON, that checkValue
// accepts once they are decoded (numbers as json.Number): a JSON object, at
// most MaxArgsDepth levels deep, whose numbers checkNumber accepts. It scans
// the bytes instead of decoding them; anything it refuses is decoded and
// checked by checkValue, for the error that names where (D192: the args checks, by a scan).
// TestCheckArgsJSON holds the two equal.
func checkArgsJSON(b []byte) error {
	if ok := scanArgs(b); !ok {
		var args map[string]any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&args); err != nil || dec.More() || args == nil {
			return badRequest("args are not a JSON object")
		}
		if err := checkValue(args); err != nil {
			return err
		}
		return badRequest("args are not canonical JSON") // scanArgs refuses no valid args but for this
	}
	return nil
}

// scanArgs reports whether b is one JSON object, valid UTF-8, at most
// MaxArgsDepth levels deep, with numbers that checkNumber accepts.
func scanArgs(b []byte) bool {
	if len(b) == 0 || b[0] != '{' || !json.Valid(b) || !utf8.Valid(b) {
		return false
	}
	depth := 0
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"': // valid JSON: the string ends
			for i++; b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case c == '{' || c == '[':
			if depth++; depth > MaxArgsDepth {
				return false
			}
		case c == '}' || c == ']':
			depth--
		case c == '-' || '0' <= c && c <= '9':
			j := i + 1
			for j < len(b) && isNumberByte(b[j]) {
				j++
			}
			if checkNumber(string(b[i:j])) != nil {
				return false
			}
			i = j - 1
		}
	}
	return true
}

func isNumberByte(c byte) bool {
	return '0' <= c && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}

// Approve decides an approval as Runtime.Approve does.
func (s *Scratch) Approve(ctx context.Context, ap Approval) (lineage.Verdict, error) {
	return s.pending(ctx, ap, modeApprove)
}

// Reject decides a rejection as Runtime.Reject does.
func (s *Scratch) Reject(ctx context.Context, ap Approval) (lineage.Verdict, error) {
	return s.pending(ctx, ap, modeReject)
}

func (s *Scratch) pending(ctx context.Context, ap Approval, m mode) (lineage.Verdict, error) {
	o, err := s.r.pending(ctx, s.a, ap, m)
	if err != nil {
		return lineage.Verdict{}, err
	}
	return o.verdict, s.commit(o.at, o.items)
}

// Terminate kills the agent as Runtime.Terminate does.
func (s *Scratch) Terminate(k Kill) error {
	o, err := s.r.kill(s.a, k)
	if err != nil {
		return err
	}
	return s.commit(o.at, o.items)
}

// AssignedSeq returns n if id is req_<n> as the runtime assigns it (D17: assigned ids):
// the id of a request recorded at seq n without one.
func AssignedSeq(id string) (uint64, bool) { return assignedSeq(id) }

// State is the agent's folded state.
func (s *Scratch) State() lineage.State { return s.a.f.State() }

// commit seals records onto the chain (with Chain) and folds them, as append
// does, with no store.
func (s *Scratch) commit(at time.Time, items []item) error {
	f := s.a.f
	for _, it := range items {
		rec := lineage.Record{Seq: s.next, At: lineage.Time{Time: at.UTC()}, Kind: it.kind}
		if s.chain {
			var err error
			if rec, err = hashRecord(s.next, at, it, f.head); err != nil {
				return fmt.Errorf("agent %s: encoding %s record: %w", s.a.id, it.kind, err)
			}
		}
		if err := f.fold(rec, it.body, it.args); err != nil {
			return fmt.Errorf("agent %s: folding record %d: %w", s.a.id, rec.Seq, err)
		}
		s.next++
	}
	return nil
}
