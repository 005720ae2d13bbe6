package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/api"
	"github.com/lineage-guard/lineage/client"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/file"
)

// localGuard is the guard of the local store (guard.go): the runtime over
// the data directory or --store, answering in the api's types as a server
// does. Its errors about an agent id read as the session says them
// (session.agentError).
type localGuard struct {
	s      *session
	by     string    // --by: who approves, rejects or terminates
	stderr io.Writer // verify's warnings
}

// CreateAgent compiles the normalized document again, as a server does,
// and creates the agent; a local agent has no token.
func (l *localGuard) CreateAgent(ctx context.Context, doc json.RawMessage, name, parent string) (api.Created, error) {
	c, err := compiler.Compile("", doc)
	if err != nil {
		return api.Created{}, err
	}
	opts := runtime.CreateOptions{Name: name}
	if parent != "" {
		opts.Parent = &lineage.Parent{Agent: parent}
	}
	id, err := l.s.rt.CreateAgent(ctx, c, opts)
	if err != nil {
		if parent != "" {
			return api.Created{}, l.s.agentError(parent, err)
		}
		return api.Created{}, err
	}
	return api.Created{Agent: id, Digest: c.Digest}, nil
}

// AgentsPage is a page of the store's agent index.
func (l *localGuard) AgentsPage(_ context.Context, p client.Page) ([]api.Agent, string, error) {
	rows, next, err := l.s.rt.ListAgents(runtime.ListQuery{Limit: p.Limit, Cursor: p.Cursor, Status: p.Status})
	if err != nil {
		return nil, "", err
	}
	out := make([]api.Agent, len(rows))
	for i, a := range rows {
		out[i] = api.Agent{Agent: a.Agent, Name: a.Name, Status: a.Status, Digest: a.Digest, Seq: a.Seq, Error: a.Error}
	}
	return out, next, nil
}

func (l *localGuard) State(ctx context.Context, agent string) (lineage.State, error) {
	st, err := l.s.rt.State(ctx, agent)
	return st, l.agentError(agent, err)
}

func (l *localGuard) Policy(ctx context.Context, agent string) (string, json.RawMessage, error) {
	info, err := l.s.rt.Info(ctx, agent)
	return info.Digest, info.Policy, l.agentError(agent, err)
}

func (l *localGuard) Request(ctx context.Context, agent string, req lineage.Request) (lineage.Verdict, error) {
	v, err := l.s.rt.Request(ctx, agent, req)
	return v, l.agentError(agent, err)
}

func (l *localGuard) ApproveWithNote(ctx context.Context, agent, id, note string) (lineage.Verdict, error) {
	v, err := l.s.rt.Approve(ctx, agent, runtime.Approval{RequestID: id, By: l.by, Note: note})
	return v, l.agentError(agent, err)
}

func (l *localGuard) RejectWithNote(ctx context.Context, agent, id, note string) (lineage.Verdict, error) {
	v, err := l.s.rt.Reject(ctx, agent, runtime.Approval{RequestID: id, By: l.by, Note: note})
	return v, l.agentError(agent, err)
}

func (l *localGuard) Terminate(ctx context.Context, agent, reason string) (lineage.State, error) {
	st, err := l.s.rt.Terminate(ctx, agent, runtime.Kill{By: l.by, Note: reason})
	return st, l.agentError(agent, err)
}

// Log verifies the log and returns its stored lines from seq from on, up to
// the first bad record; a damaged log's error is a *runtime.ChainError or a
// *store.DamageError (damageOf).
func (l *localGuard) Log(_ context.Context, agent string, from uint64) ([]byte, error) {
	_, lines, err := readLog(l.s, agent)
	if err != nil && !isDamage(err) {
		return nil, l.agentError(agent, err)
	}
	var b bytes.Buffer
	for seq, line := range lines {
		if uint64(seq) >= from {
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return b.Bytes(), err
}

func (l *localGuard) Verify(_ context.Context, agent string) (api.VerifyResult, error) {
	res, _, err := l.verify(agent)
	return res, err
}

// verify verifies an agent's log in the store: its chain, then (with the
// chain intact) the store's index of it, a difference being a warning
// (docs/decisions.md: verify checks the index), and the size and head of
// the last checkpoint a server signed of it (D252 (the signed size checked
// when an agent is met)). It returns the records as well, for verify
// --checkpoint.
func (l *localGuard) verify(agent string) (api.VerifyResult, []lineage.Record, error) {
	recs, _, err := readLog(l.s, agent)
	if err != nil && !isDamage(err) {
		return api.VerifyResult{}, nil, l.agentError(agent, err)
	}
	if err == nil {
		if c, ok := l.s.st.(store.IndexChecker); ok {
			diff, cerr := c.CheckIndexOf(agent)
			if cerr != nil {
				return api.VerifyResult{}, nil, cerr
			}
			for _, d := range diff {
				fmt.Fprintf(l.stderr, "warning: the store's index differs from the log: %s (it is read again from the logs when the store next opens with the log changed, or without %s)\n", d, file.IndexName)
			}
		}
		if m, ok := l.s.st.(store.Marks); ok {
			mark, merr := m.LoadMark(agent)
			if merr != nil && !isDamage(merr) {
				return api.VerifyResult{}, nil, merr
			}
			err = merr
			if why := mark.Shortfall(uint64(len(recs)), func(seq uint64) string { return recs[seq].Hash }); merr == nil && why != "" {
				seq := min(uint64(len(recs)), mark.Size-1)
				res := verifiedHead(recs)
				res.Seq, res.Message = &seq, api.CodeCheckpointDiverged+": "+why
				return res, recs, nil
			}
		}
	}
	res, err := verifyResultOf(recs, err)
	return res, recs, err
}

// verifyResultOf is the verify result of a log read as recs with err: ok,
// or the first bad seq and why. An err that is not damage is returned.
func verifyResultOf(recs []lineage.Record, err error) (api.VerifyResult, error) {
	res := verifiedHead(recs)
	seq, reason, damaged := damageOf(err)
	switch {
	case damaged:
		res.Seq, res.Message = &seq, reason
	case err != nil:
		return res, err
	case len(recs) < 2:
		// A log is at least genesis and policy (an empty file is a Create
		// whose first append never happened).
		seq := uint64(len(recs))
		res.Seq, res.Message = &seq, "log ends before its policy record"
	default:
		res.OK = true
	}
	return res, nil
}

// verifiedHead is a result's records and head: the records read intact.
func verifiedHead(recs []lineage.Record) api.VerifyResult {
	n := len(recs)
	res := api.VerifyResult{Records: &n}
	if n > 0 {
		res.Head = recs[n-1].Hash
	}
	return res
}

// PendingPage is a page of the store's pending index.
func (l *localGuard) PendingPage(_ context.Context, p client.Page) ([]api.Pending, string, error) {
	rows, next, err := l.s.rt.ListPending(runtime.ListQuery{Limit: p.Limit, Cursor: p.Cursor})
	if err != nil {
		return nil, "", err
	}
	out := make([]api.Pending, len(rows))
	for i, r := range rows {
		out[i] = api.Pending{Agent: r.Agent, Name: r.Name, RequestID: r.RequestID, Tool: r.Tool,
			Args: r.Args, At: lineage.Time{Time: r.At}, Cost: r.Cost}
	}
	return out, next, nil
}

// agentError is session.agentError, nil for nil.
func (l *localGuard) agentError(agent string, err error) error {
	if err == nil {
		return nil
	}
	return l.s.agentError(agent, err)
}
