package store

import "context"

// Two optional capabilities of a Store that the runtime uses across nodes
// (docs/stores.md). A store without them works as before: it is treated as having
// no other writer, and a read of a log's tail falls back to Scan.

// Shared is implemented by a store whose logs other writers may append to
// while this one is open: other processes, other guard nodes. The runtime
// then confirms every answer it gives without an append (a retry, a read, a
// refusal) against the store's tail before it answers. A file store holds
// an exclusive lock on its directory, so it has no other writer and does
// not implement Shared.
type Shared interface {
	// Shared reports whether other writers may append to the store's logs.
	Shared() bool
}

// FromScanner is implemented by a store that can read a log from a seq on
// without reading what comes before it.
type FromScanner interface {
	// ScanFrom calls fn with each record of agent's log from seq from on, in
	// order, as Scan does. It sees at least the records acknowledged before
	// it began. With from beyond the log's end it calls fn never and returns
	// nil; it may then return nil also for an agent without a log (the
	// caller knows the log exists: it read seq from-1).
	ScanFrom(agent string, from uint64, fn func(seq uint64, rec []byte) error) error
}

// IsShared reports whether st has other writers (see Shared).
func IsShared(st Store) bool {
	s, ok := st.(Shared)
	return ok && s.Shared()
}

// ScanFrom reads agent's log from seq from on: with st's ScanFrom if it has
// one, else with Scan, skipping the records before from.
func ScanFrom(st Store, agent string, from uint64, fn func(seq uint64, rec []byte) error) error {
	if fs, ok := st.(FromScanner); ok {
		return fs.ScanFrom(agent, from, fn)
	}
	return st.Scan(agent, func(seq uint64, rec []byte) error {
		if seq < from {
			return nil
		}
		return fn(seq, rec)
	})
}

// News is a store shared by several nodes that tells each of them of the
// appends the others made (docs/stores.md, "One stream of news").
type News interface {
	// Listen calls fn with the agent and the seq range of each append that
	// another store value (another node) committed, soon after its commit,
	// until ctx ends. gap is called when news may have been lost (the
	// listening connection failed and was made again): the caller reads
	// again whatever it follows. fn and gap run on one goroutine, in order.
	Listen(ctx context.Context, fn func(agent string, first, last uint64), gap func())
}
