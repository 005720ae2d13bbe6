package runtime

import (
	"errors"
	"fmt"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/policy"
	"github.com/lineage-guard/lineage/runtime/store"
)

// This file holds what a service that signs checkpoints as logs grow (server,
// docs/history.md) reads from the runtime: notice of each append and of each
// agent that leaves memory, a log's tail checked strictly from a known head,
// and a log's record hashes under the fast chain check.

// LogWatch is told of a runtime's logs. Both functions run under the
// runtime's locks (an agent's, the agent table's): they must return at once
// and must not call the runtime.
type LogWatch struct {
	// Appended: agent's log now ends at seq (its records up to seq are
	// durable), after an append of this runtime or records of another writer
	// that it folded.
	Appended func(agent string, seq uint64)
	// Unloaded: agent left memory (the LRU bound, the idle timeout, a failure).
	Unloaded func(agent string)
}

// WatchLogs sets the runtime's watcher (one at a time; nil for none).
func (r *Runtime) WatchLogs(w *LogWatch) { r.watch.Store(w) }

// grew tells the watcher that a's log grew (a is locked).
func (r *Runtime) grew(a *agent) {
	if w := r.watch.Load(); w != nil && w.Appended != nil {
		w.Appended(a.id, a.f.seq)
	}
}

// left tells the watcher that agent id left memory.
func (r *Runtime) left(id string) {
	if w := r.watch.Load(); w != nil && w.Unloaded != nil {
		w.Unloaded(id)
	}
}

// IsLoaded says whether the runtime holds agent id in memory now.
func (r *Runtime) IsLoaded(id string) bool {
	t := r.agents
	t.mu.Lock()
	s := t.byID[id]
	t.mu.Unlock()
	return s != nil && s.ready.Load() && s.a != nil
}

// VerifyTail reads agent's stored log from seq from on and checks each record
// as VerifyLog does, strictly (the JCS library's canonical form, the chain,
// the order of kinds, bodies that decode and are canonical, times the runtime
// holds), chained to prev, the hash of record from-1, whose kind is
// prevKind ("" and "" when from is 0). It passes each record to fn; fn must
// not keep its Body past the call.
//
// From genesis it is VerifyLog with the runtime's compiler (a policy this
// runtime already prepared is not compiled again). From a later seq
// it cannot run the fold's checks that span records (an approval names a
// pending request), which need the state from genesis: the runtime ran them
// when it folded the same records (its own appends, a catch-up, opening the
// agent) — and only for records it folded, which is why a caller that signs
// what it read passes the log's length the runtime acknowledged as upto:
// records at seq upto and later are left unread (upto 0: to the log's end).
// lineage.ErrUnknownAgent if there is no log.
func (r *Runtime) VerifyTail(agentID string, from, upto uint64, prev string, prevKind lineage.Kind, fn func(lineage.Record) error) error {
	var err error
	if from == 0 {
		f, pk := newFolded(), lineage.Kind("")
		var compile func([]byte) (*policy.Compiled, error)
		if r.opts.Compile != nil {
			compile = r.compileKnown // the policy compiles to its digest (D53 (verify runs what open runs)), once per digest
		}
		err = r.store.Scan(agentID, func(seq uint64, line []byte) error {
			if upto > 0 && seq >= upto {
				return errStopScan
			}
			rec, err := openRecordStrict(line, seq, f.head)
			if err != nil {
				return err
			}
			if err := kindFollows(rec, seq, pk); err != nil {
				return err
			}
			if _, err := foldChecked(f, rec, compile); err != nil {
				return err
			}
			pk = rec.Kind
			return fn(rec)
		})
	} else {
		next := from
		err = store.ScanFrom(r.store, agentID, from, func(seq uint64, line []byte) error {
			if upto > 0 && seq >= upto {
				return errStopScan
			}
			if seq != next {
				return &ChainError{Seq: seq, Reason: fmt.Sprintf("the store passed record %d, expected %d", seq, next)}
			}
			rec, err := openRecordStrict(line, seq, prev)
			if err != nil {
				return err
			}
			if err := kindFollows(rec, seq, prevKind); err != nil {
				return err
			}
			if err := recordChecked(rec); err != nil {
				return err
			}
			prev, prevKind, next = rec.Hash, rec.Kind, seq+1
			return fn(rec)
		})
	}
	switch {
	case errors.Is(err, errStopScan):
		err = nil
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: %s", lineage.ErrUnknownAgent, agentID)
	}
	return err
}

// recordChecked runs the checks of foldChecked that need no state: the time
// is one the runtime holds, the body decodes and is canonical, a policy
// record's digest is that of its document.
func recordChecked(rec lineage.Record) error {
	seq := rec.Seq
	if err := recordable(rec.At.Time); err != nil {
		return &ChainError{Seq: seq, Reason: "record time is outside the times the runtime holds"}
	}
	body, canonArgs, err := decodeBody(rec)
	if err != nil {
		return &ChainError{Seq: seq, Reason: err.Error()}
	}
	if !bodyIsCanonical(rec, body, canonArgs) {
		return &ChainError{Seq: seq, Reason: "record body is not in canonical form (RFC 8785)"}
	}
	if pb, ok := body.(*lineage.PolicyBody); ok {
		if got := hashText(pb.Policy); got != pb.Digest {
			return &ChainError{Seq: seq, Reason: fmt.Sprintf("policy digest is %s but its document hashes to %s", pb.Digest, got)}
		}
	}
	return nil
}

// ChainHashes passes the seq, hash and kind of each of the first n records of
// agent's stored log to fn, checking only that each line hashes to its hash
// and chains to the one before (the check opening a log runs on each line,
// without the canonical-form checks of verify): what rebuilding a Merkle tree
// needs, whose root the caller compares with a signed one. Of a log shorter
// than n it passes what there is: the caller counts.
func (r *Runtime) ChainHashes(agentID string, n uint64, fn func(seq uint64, hash string, kind lineage.Kind) error) error {
	var (
		prev    string
		next    uint64
		scratch []byte
	)
	err := r.store.Scan(agentID, func(seq uint64, line []byte) error {
		if seq >= n {
			return errStopScan
		}
		if seq != next {
			return &ChainError{Seq: seq, Reason: fmt.Sprintf("the store passed record %d, expected %d", seq, next)}
		}
		rec, err := openRecordFast(line, seq, prev, &scratch)
		if err != nil {
			return err
		}
		prev, next = rec.Hash, seq+1
		return fn(seq, rec.Hash, rec.Kind)
	})
	switch {
	case errors.Is(err, errStopScan):
		err = nil
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: %s", lineage.ErrUnknownAgent, agentID)
	}
	return err
}
