package store

import (
	"bytes"
	"errors"
	"fmt"
)

// MaxRecord is the largest record, in bytes without its newline, that a store
// accepts and that Scan of the file store can read back.
const MaxRecord = 8 << 20

// MaxAgentID is the longest agent id a store accepts.
const MaxAgentID = 128

var (
	// ErrBadAgent is returned for an agent id that is not 1 to 128 characters of
	// [A-Za-z0-9_.-] or that starts with '.': such an id could escape the file
	// store's directory or collide with its other files, so every store refuses it.
	ErrBadAgent = errors.New("store: invalid agent id")
	// ErrBadRecord is returned by Append for a record that is empty, longer than
	// MaxRecord or contains a newline (a record is one line of the log).
	ErrBadRecord = errors.New("store: invalid record")
	// ErrDamaged is wrapped by a *DamageError: the log's bytes are not a log.
	ErrDamaged = errors.New("store: log damaged")
)

// DamageError reports a log whose bytes cannot be a log written by a store: an
// empty line, or a line longer than MaxRecord. Records before Seq are intact.
// A torn tail (an unterminated last line) is not damage: see Store.Scan.
type DamageError struct {
	Agent  string // the agent whose log is damaged
	Path   string // the file, for the file store
	Seq    uint64 // the first damaged record
	Offset int64  // byte offset of that record in the file; -1 where there is no file offset (a database row)
	Reason string // e.g. "empty line"
}

func (e *DamageError) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("store: %s: record %d: %s (%s)", e.Agent, e.Seq, e.Reason, e.Path)
	}
	return fmt.Sprintf("store: %s: record %d: %s (%s, byte %d)", e.Agent, e.Seq, e.Reason, e.Path, e.Offset)
}

// Unwrap makes errors.Is(err, ErrDamaged) hold.
func (e *DamageError) Unwrap() error { return ErrDamaged }

// checkAgent accepts ids matching ^[A-Za-z0-9_.-]{1,128}$ that do not start
// with '.'.
func checkAgent(agent string) error {
	if validAgent(agent) {
		return nil
	}
	shown := agent
	if len(shown) > MaxAgentID+8 {
		shown = shown[:MaxAgentID+8] + "..."
	}
	return fmt.Errorf("%w %q: want 1 to %d characters of [A-Za-z0-9_.-], not starting with '.'",
		ErrBadAgent, shown, MaxAgentID)
}

// validAgent is checkAgent without the error.
func validAgent[S string | []byte](agent S) bool {
	ok := len(agent) >= 1 && len(agent) <= MaxAgentID && agent[0] != '.'
	for i := 0; ok && i < len(agent); i++ {
		c := agent[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '_' || c == '.' || c == '-'
	}
	return ok
}

// checkRecords validates the records of one Append and returns their total
// size in bytes, not counting newlines.
func checkRecords(agent string, firstSeq uint64, recs [][]byte) (int, error) {
	total := 0
	for i, r := range recs {
		var why string
		switch {
		case len(r) == 0:
			why = "empty"
		case len(r) > MaxRecord:
			why = fmt.Sprintf("%d bytes, more than the limit of %d", len(r), MaxRecord)
		case bytes.IndexByte(r, '\n') >= 0:
			why = "contains a newline"
		}
		if why != "" {
			return 0, fmt.Errorf("%w: %s: record %d: %s", ErrBadRecord, agent, firstSeq+uint64(i), why)
		}
		total += len(r)
	}
	return total, nil
}

func seqError(agent, path string, firstSeq, have uint64) error {
	where := ""
	if path != "" {
		where = " (" + path + ")"
	}
	return fmt.Errorf("%w: %s: append at seq %d, but the log has %d records%s", ErrSeq, agent, firstSeq, have, where)
}
