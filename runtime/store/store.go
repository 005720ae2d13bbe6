// Package store owns the contract of the durable bytes of agents' logs: the
// Store interface (append encoded records for (agent, seq), read them back in
// order, with durability and order guaranteed) and its optional capabilities,
// the rows of the indexes the lists are served from, the checks every backend
// runs at its edge, and the sentinel errors callers branch on.
//
// The backends are packages of their own: file (the embedded default),
// memory and postgres; storetest holds the contract they all pass. It knows
// nothing of hashes, verdicts or state: the chain and the fold live in
// package runtime.
package store

import "errors"

// Store persists each agent's log as an ordered sequence of records, one encoded
// record (a single line of JSON, no newline) per seq, starting at seq 0.
//
// Implementations are safe for concurrent use. Appends to one agent are issued
// one at a time by the runtime (it serializes an agent's requests), appends to
// different agents may run concurrently and should share fsyncs (group commit).
//
// Agent ids are 1 to MaxAgentID characters of [A-Za-z0-9_.-], not starting
// with '.'; every method refuses others with ErrBadAgent. A record is a
// non-empty line of at most MaxRecord bytes without a newline (ErrBadRecord).
// Errors name the agent (and, for a file, its path); callers branch on the
// sentinels below with errors.Is.
type Store interface {
	// Create makes a new, empty log for agent. ErrExists if the agent has a log.
	// The log becomes durable with its first records: the Append of seq 0
	// makes it appear whole or not at all, whenever a crash comes, and a log
	// that a crash left without records is not listed by Agents (docs/log.md:
	// a crash during a create breaks nothing else).
	Create(agent string) error
	// Append writes recs as the records firstSeq, firstSeq+1, ... of agent's log.
	// firstSeq must equal the number of records already in the log (ErrSeq
	// otherwise). Append returns only once every record is durable; if it returns
	// an error, none of recs counts as written and the log is as before.
	// The store may keep recs rather than copy them (the memory store does):
	// the caller must not modify them once it has called Append.
	//
	// A crash before Append returns may leave none, all, or a prefix of recs
	// (whole records only) in the log: an append that was never acknowledged
	// may still have happened, so recovery must accept any such prefix.
	Append(agent string, firstSeq uint64, recs ...[]byte) error
	// Scan calls fn with each record of agent's log in order (seq 0 first). The
	// slice is only valid during the call. A torn tail (a final record that was
	// only partly written: no terminating newline, and not a whole JSON value)
	// is not passed to fn and is discarded before the next Append; a final
	// record that lacks only its newline is a record. ErrNotFound if no log.
	// An error from fn stops the scan and is returned unchanged. Scan sees the
	// records acknowledged before it began; fn may Append to the log it scans
	// (it must not modify rec, nor Close the store). Bytes that cannot be a
	// log (an empty line, an over-long line) stop the scan with a *DamageError
	// (ErrDamaged) naming the first bad seq; records before it are passed on.
	Scan(agent string, fn func(seq uint64, rec []byte) error) error
	// Agents lists the agents with a log, sorted: those with records, and
	// those this store created since it was opened.
	Agents() ([]string, error)
	// Close releases resources; pending appends complete first. Every later
	// call, Close included, returns ErrClosed.
	Close() error
}

var (
	// ErrExists is returned by Create for an agent that already has a log.
	ErrExists = errors.New("store: log already exists")
	// ErrNotFound is returned for an agent without a log.
	ErrNotFound = errors.New("store: no such log")
	// ErrSeq is returned by Append when firstSeq is not the log's length.
	ErrSeq = errors.New("store: seq out of order")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("store: closed")
	// ErrReadOnly is returned by Create and Append on a store opened read-only.
	ErrReadOnly = errors.New("store: opened read-only")
)
