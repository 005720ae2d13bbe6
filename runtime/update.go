package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime/store"
)

// This file holds what lets several runtimes (guard nodes, docs/stores.md) share
// one store: an append that loses the race for its seq (store.ErrSeq) means
// another node wrote; the agent reads the log's tail, folds it and decides
// again. An answer given without an append (a retry, a refusal, a read) is
// confirmed against the tail first when the store has other writers. Any
// other failed append drops the agent's state: the append may have been
// written (store.ErrUnavailable), so only the store can say what the state is.

// maxRaces bounds how often one call decides again after losing its seq.
const maxRaces = 32

// ErrContended is returned when a call lost the race for its seq maxRaces
// times in a row: nothing was recorded, and a later try may succeed.
var ErrContended = errors.New("the agent's log is contended by other writers")

// acquire returns id's agent, loaded and locked. It never returns an agent
// that the table evicted or a failure dropped.
func (r *Runtime) acquire(ctx context.Context, id string) (*agent, error) {
	for {
		a, err := r.load(ctx, id)
		if err != nil {
			return nil, err
		}
		a.mu.Lock()
		if !a.gone {
			return a, nil
		}
		a.mu.Unlock()
	}
}

// view returns id's agent locked, with every record that the store
// acknowledged before the call folded in (docs/stores.md: a read on any node
// reflects every acknowledged record). The caller unlocks it.
func (r *Runtime) view(ctx context.Context, id string) (*agent, error) {
	a, err := r.acquire(ctx, id)
	if err != nil {
		return nil, err
	}
	if r.shared {
		if _, err := r.catchUp(ctx, a); err != nil {
			r.drop(a)
			a.mu.Unlock()
			return nil, err
		}
	}
	return a, nil
}

// outcome is what an operation decided on an agent's state: the verdict to
// answer (none for a kill, whose answer is the state after it), and the
// records that make it durable with their time (none for an answer that
// records nothing: a retry, a refusal that is not recorded).
type outcome struct {
	verdict lineage.Verdict
	at      time.Time
	items   []item
}

// update runs op on id's agent under its lock until its outcome holds, and
// returns the outcome's verdict: op decides from the agent's state and
// returns its outcome (or an error). The outcome's records are appended at the
// next seq; if another writer took it, the agent catches up and op runs
// again. On a shared store an outcome without records is confirmed against
// the store's tail: if records came in, op runs again on them. On any other
// failure of the append the agent's state is dropped and nothing is
// acknowledged. op may run several times; only its last outcome counts.
// done, if not nil, sees the agent (still locked) once the outcome holds
// without an error.
func (r *Runtime) update(ctx context.Context, id string, op func(a *agent) (outcome, error), done func(a *agent)) (lineage.Verdict, error) {
	a, err := r.acquire(ctx, id)
	if err != nil {
		return lineage.Verdict{}, err
	}
	defer a.mu.Unlock()
	finish := func(o outcome, err error) (lineage.Verdict, error) {
		if err != nil {
			return lineage.Verdict{}, err
		}
		if done != nil {
			done(a)
		}
		return o.verdict, nil
	}
	caughtUp := false
	for races := 0; ; {
		o, err := op(a)
		if err != nil || len(o.items) == 0 {
			if !r.shared || caughtUp {
				return finish(o, err)
			}
			n, cerr := r.catchUp(ctx, a)
			if cerr != nil {
				r.drop(a)
				return lineage.Verdict{}, cerr
			}
			if caughtUp = true; n == 0 {
				return finish(o, err)
			}
			continue
		}
		_, span := r.start(ctx, SpanCommit)
		err = a.append(r.store, o.at, o.items...)
		endSpan(span, err)
		if err == nil {
			r.grew(a)
			return finish(o, nil)
		}
		if !errors.Is(err, store.ErrSeq) {
			r.drop(a)
			return lineage.Verdict{}, err
		}
		if races++; races > maxRaces {
			return lineage.Verdict{}, fmt.Errorf("agent %s: %w: the seq was taken %d times in a row; nothing was recorded", a.id, ErrContended, races)
		}
		// ErrSeq: nothing was written, the state is as before. Another writer
		// holds the seq: fold what it wrote and decide again.
		if _, cerr := r.catchUp(ctx, a); cerr != nil {
			r.drop(a)
			return lineage.Verdict{}, cerr
		}
		caughtUp = true
	}
}

// catchUp folds the records of a's log beyond a's state (another writer's),
// with the checks replay runs, and returns how many it folded. a is locked.
// On an error a's state may be partly advanced: the caller drops it.
func (r *Runtime) catchUp(ctx context.Context, a *agent) (int, error) {
	f := a.f
	fo := folder{f: f, prev: lineage.KindAction} // any kind that may precede an action
	if f.status == lineage.Terminated {
		fo.prev = lineage.KindTermination
	}
	err := store.ScanFrom(r.store, a.id, f.seq+1, func(seq uint64, line []byte) error {
		if seq != f.seq+1 {
			return &ChainError{Seq: seq, Reason: fmt.Sprintf("the store passed record %d after record %d", seq, f.seq)}
		}
		return fo.line(seq, line)
	})
	n := fo.n
	if err != nil {
		return n, fmt.Errorf("agent %s: catching up with the store: %w", a.id, err)
	}
	if n > 0 {
		r.grew(a)
	}
	if n > 0 && f.owed != "" {
		// Another writer's verdict ended the agent but its termination record
		// is missing (that writer crashed between two writes): seal the log.
		err := a.append(r.store, f.lastAt, item{kind: lineage.KindTermination, body: &lineage.TerminationBody{Reason: f.owed}})
		if errors.Is(err, store.ErrSeq) {
			m, err := r.catchUp(ctx, a)
			return n + m, err
		}
		if err != nil && !errors.Is(err, store.ErrReadOnly) {
			return n, fmt.Errorf("agent %s: completing its termination: %w", a.id, err)
		}
	}
	return n, nil
}

// drop forgets a's state after a failure (a is locked): the next call loads
// the agent anew from the store.
func (r *Runtime) drop(a *agent) {
	a.gone = true
	if s := a.slot; s != nil {
		r.agents.remove(s)
	}
	r.left(a.id)
}

// Loaded says how many agents the runtime holds in memory.
func (r *Runtime) Loaded() int { return r.agents.len() }

// LoadedPending counts the pending requests of the agents in memory, without
// loading any (lineage_pending_requests).
func (r *Runtime) LoadedPending() int {
	n := 0
	for _, a := range r.agents.loaded() {
		a.mu.Lock()
		if !a.gone {
			n += len(a.f.pending)
		}
		a.mu.Unlock()
	}
	return n
}
