package store

import "errors"

// ErrUnavailable is wrapped by the errors of a store whose backing service
// (a database) cannot be reached or failed mid-operation. The store recovers
// by itself once the service is back; a server answers 503. An Append that
// fails with it may or may not have been written: the caller must read the
// log again before it appends anew.
var ErrUnavailable = errors.New("store: backing service unavailable")

// ErrUnknownOutcome is wrapped, beside ErrUnavailable, by the error of an
// Append that reached the backing service but whose commit was not confirmed
// (the connection was lost during the commit): the records may be in the log
// or not. A server answers 503 unknown_outcome; a retry with the same request
// id resolves it (docs/stores.md, "Several nodes").
var ErrUnknownOutcome = errors.New("store: the outcome of the append is unknown")

// CheckAgent returns an error wrapping ErrBadAgent unless agent is a valid
// agent id (see Store). Backends outside this package call it at their edge.
func CheckAgent(agent string) error { return checkAgent(agent) }

// CheckRecords returns an error wrapping ErrBadRecord, naming agent and the
// record's seq, unless every record of an Append at firstSeq is valid (see
// Store). It returns their total size in bytes.
func CheckRecords(agent string, firstSeq uint64, recs [][]byte) (int, error) {
	return checkRecords(agent, firstSeq, recs)
}

// SeqError is the ErrSeq error of an Append at firstSeq to a log of have
// records; where, if not empty, names the log's location.
func SeqError(agent, where string, firstSeq, have uint64) error {
	return seqError(agent, where, firstSeq, have)
}
