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
	"github.com/lineage-guard/lineage/server"
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
// when an agent is met)). The answer is server.VerifyResultOf's, as a
// server's verify answers. It returns the records as well, for verify
// --checkpoint.
func (l *localGuard) verify(agent string) (api.VerifyResult, []lineage.Record, error) {
	recs, _, err := readLog(l.s, agent)
	if err != nil && !isDamage(err) {
		return api.VerifyResult{}, nil, l.agentError(agent, err)
	}
	if c, ok := l.s.st.(store.IndexChecker); ok && err == nil {
		diff, cerr := c.CheckIndexOf(agent)
		if cerr != nil {
			return api.VerifyResult{}, nil, cerr
		}
		for _, d := range diff {
			fmt.Fprintf(l.stderr, "warning: the store's index differs from the log: %s (it is read again from the logs when the store next opens with the log changed, or without %s)\n", d, file.IndexName)
		}
	}
	marks, _ := l.s.st.(store.Marks)
	res, err := server.VerifyResultOf(agent, recs, err, marks)
	return res, recs, err
}

// PendingPage is a page of the store's pending index.
func (l *localGuard) PendingPage(_ context.Context, p client.Page) ([]api.Pending, string, error) {
	rows, next, err := l.s.rt.ListPending(runtime.ListQuery{Limit: p.Limit, Cursor: p.Cursor})
	if err != nil {
		return nil, "", err
	}
	out := make([]api.Pending, len(rows))
	for i, r := range rows {
		out[i] = server.PendingOf(r)
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
