package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime/store"
)

// This file holds what the guard service (package server) reads from the
// runtime beyond the calls of runtime.go: a request's current verdict, an
// agent's name and policy, its pending requests with their times and costs,
// and how many agents are loaded. None of it writes a record.

// RequestVerdict returns the current verdict of one of an agent's requests:
// the recorded one, an approval's once decided, and deny "terminated" for a
// request that was still pending when the agent was terminated (docs/decision-order.md
// step 1). lineage.ErrUnknownRequest if the agent never made it.
func (r *Runtime) RequestVerdict(ctx context.Context, agentID, requestID string) (lineage.Verdict, error) {
	a, err := r.view(ctx, agentID)
	if err != nil {
		return lineage.Verdict{}, err
	}
	defer a.mu.Unlock()
	seen, ok := a.f.lookup(requestID)
	if !ok {
		return lineage.Verdict{}, fmt.Errorf("%w: agent %s has no request %q", lineage.ErrUnknownRequest, agentID, requestID)
	}
	v := seen.verdict
	if v.Decision == lineage.Pending && a.f.status == lineage.Terminated {
		return lineage.Verdict{Decision: lineage.Deny, Reason: "terminated", RequestID: requestID}, nil
	}
	return v, nil
}

// AgentInfo is what a listing shows of an agent: its genesis name, its
// policy and where its log stands.
type AgentInfo struct {
	Agent  string
	Name   string
	Digest string
	// Policy is the normalized policy document of record 1 (canonical JSON).
	Policy json.RawMessage
	Status lineage.Status
	Seq    uint64
}

var errStopScan = errors.New("stop scan")

// Info returns an agent's name, policy and status.
func (r *Runtime) Info(ctx context.Context, agentID string) (AgentInfo, error) {
	a, err := r.view(ctx, agentID)
	if err != nil {
		return AgentInfo{}, err
	}
	defer a.mu.Unlock()
	// The name is genesis's, which the fold keeps (checkActor needs it too).
	return AgentInfo{Agent: agentID, Name: a.f.name, Digest: a.f.digest, Policy: a.f.policyDoc, Status: a.f.status, Seq: a.f.seq}, nil
}

// PendingRequest is a request that awaits a person's decision.
type PendingRequest struct {
	Agent     string
	RequestID string
	Tool      string
	Args      map[string]any
	// At is the time of its action record; Cost what its rule charges if approved.
	At   time.Time
	Cost int64
	Seq  uint64
}

// Pending lists an agent's pending requests in the order they were made.
func (r *Runtime) Pending(ctx context.Context, agentID string) ([]PendingRequest, error) {
	a, err := r.view(ctx, agentID)
	if err != nil {
		return nil, err
	}
	out := make([]PendingRequest, 0, len(a.f.pending))
	bySeq := map[uint64]int{}
	pol := a.eng.compiled.Policy
	for id, req := range a.f.pending {
		p := PendingRequest{Agent: agentID, RequestID: id, Tool: req.Tool, Args: req.Args}
		if seen, ok := a.f.lookup(id); ok {
			p.Seq = seen.verdict.Seq
		}
		if rule, ok := pol.Tools[req.Tool]; ok {
			p.Cost = rule.Cost
		} else if pol.DefaultRule != nil {
			p.Cost = pol.DefaultRule.Cost
		}
		out = append(out, p)
	}
	a.mu.Unlock()
	if len(out) == 0 {
		return out, nil
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	for i, p := range out {
		bySeq[p.Seq] = i
	}
	// The time of an action is only in its record: read the log from the
	// first pending one on.
	first, left := out[0].Seq, len(out)
	err = r.store.Scan(agentID, func(seq uint64, line []byte) error {
		if seq < first {
			return nil
		}
		i, ok := bySeq[seq]
		if !ok {
			return nil
		}
		var rec struct {
			At lineage.Time `json:"at"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			return &ChainError{Seq: seq, Reason: err.Error()}
		}
		out[i].At = rec.At.Time
		if left--; left == 0 {
			return errStopScan
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return nil, fmt.Errorf("agent %s: %w", agentID, err)
	}
	return out, nil
}

// PendingCount says how many requests of a loaded agent await a decision.
func (r *Runtime) PendingCount(ctx context.Context, agentID string) (int, error) {
	a, err := r.view(ctx, agentID)
	if err != nil {
		return 0, err
	}
	defer a.mu.Unlock()
	return len(a.f.pending), nil
}

// ScanLog passes the stored lines of an agent's log from seq from on to fn,
// byte for byte, once the agent has been opened (its log verified) without
// error. lineage.ErrUnknownAgent if it has no log.
func (r *Runtime) ScanLog(ctx context.Context, agentID string, from uint64, fn func(seq uint64, line []byte) error) error {
	if _, err := r.load(ctx, agentID); err != nil {
		return err
	}
	err := r.store.Scan(agentID, func(seq uint64, line []byte) error {
		if seq < from {
			return nil
		}
		return fn(seq, line)
	})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s", lineage.ErrUnknownAgent, agentID)
	}
	return err
}
