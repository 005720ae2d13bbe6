package store

import "fmt"

// Mark is the size and head of the last checkpoint a node signed of an
// agent's log: the high-water below which the log may never go again
// (docs/history.md). Size 0 is no mark.
type Mark struct {
	Size uint64 `json:"size"`
	Head string `json:"head"`
}

// Shortfall says why a log of size records, whose record seq has the hash
// hashAt(seq), does not extend the mark; "" if it does, or if there is no
// mark. The server and the CLI's verify both judge a log by it.
func (m Mark) Shortfall(size uint64, hashAt func(seq uint64) string) string {
	switch {
	case m.Size == 0:
		return ""
	case size < m.Size:
		return fmt.Sprintf("the log has %d records, and a checkpoint of %d (head %s) was signed of it: records %d to %d were lost from the store",
			size, m.Size, m.Head, size, m.Size-1)
	case hashAt(m.Size-1) != m.Head:
		return fmt.Sprintf("record %d has hash %s, and a checkpoint of %d records with head %s was signed of it: the log was rewritten",
			m.Size-1, hashAt(m.Size-1), m.Size, m.Head)
	}
	return ""
}

// Marks keeps each agent's Mark across restarts. A store that can keep them
// implements it (the file store in its directory, PostgreSQL in a table
// every node shares); the server reads an agent's mark when it first meets
// the agent and raises it before it hands out a checkpoint it signed.
type Marks interface {
	// LoadMark returns agent's mark; the zero Mark if there is none.
	LoadMark(agent string) (Mark, error)
	// StoreMark raises agent's mark to m, durably, before it returns; a
	// mark of m.Size or more already kept stays (a mark never goes down).
	StoreMark(agent string, m Mark) error
}
