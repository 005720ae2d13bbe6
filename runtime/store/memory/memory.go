package store

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
)

// Memory is a Store that keeps every log in memory, for tests and benchmarks.
// Nothing survives the process; "durable" means "appended".
//
// Agents do not contend with each other: the logs live in a sync.Map and each
// has its own mutex. Append keeps the records it is given (Store lets it): the
// runtime allocates each line for the log, so a copy would be pure cost.
type Memory struct {
	logs    sync.Map // agent id → *memLog
	closed  atomic.Bool
	shared  bool
	idxOnce sync.Once
	idxv    *index // the indexes (Lister), made on first use
}

func (m *Memory) idx() *index {
	m.idxOnce.Do(func() { m.idxv = newIndex() })
	return m.idxv
}

var _ Lister = (*Memory)(nil)

// ListAgents implements Lister.
func (m *Memory) ListAgents(q ListQuery) ([]AgentRow, string, error) {
	if m.closed.Load() {
		return nil, "", ErrClosed
	}
	return m.idx().listAgents(q)
}

// ListPending implements Lister.
func (m *Memory) ListPending(q ListQuery) ([]PendingRow, string, error) {
	if m.closed.Load() {
		return nil, "", ErrClosed
	}
	return m.idx().listPending(q)
}

type memLog struct {
	mu   sync.Mutex
	recs [][]byte // recs[i] is never modified once appended
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory { return &Memory{} }

// NewSharedMemory returns an empty in-memory store that says it has other
// writers (Shared): several runtimes in one process over it behave as
// guard nodes over one database, for tests of the runtime across nodes.
func NewSharedMemory() *Memory { return &Memory{shared: true} }

// Shared implements Shared: true for a store of NewSharedMemory.
func (m *Memory) Shared() bool { return m.shared }

// Create implements Store.
func (m *Memory) Create(agent string) error {
	if m.closed.Load() {
		return ErrClosed
	}
	if err := checkAgent(agent); err != nil {
		return err
	}
	if _, loaded := m.logs.LoadOrStore(agent, new(memLog)); loaded {
		return fmt.Errorf("%w: %s", ErrExists, agent)
	}
	m.idx().create(agent)
	return nil
}

func (m *Memory) log(agent string) (*memLog, error) {
	if m.closed.Load() {
		return nil, ErrClosed
	}
	if err := checkAgent(agent); err != nil {
		return nil, err
	}
	v, ok := m.logs.Load(agent)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, agent)
	}
	return v.(*memLog), nil
}

// Append implements Store.
func (m *Memory) Append(agent string, firstSeq uint64, recs ...[]byte) error {
	l, err := m.log(agent)
	if err != nil {
		return err
	}
	if _, err := checkRecords(agent, firstSeq, recs); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := uint64(len(l.recs)); n != firstSeq {
		return seqError(agent, "", firstSeq, n)
	}
	for _, r := range recs {
		l.recs = append(l.recs, r[:len(r):len(r)])
	}
	m.idx().apply(agent, firstSeq, 0, recs) // under l.mu: in the log's order
	return nil
}

// Scan implements Store. It sees the records appended before it started; fn
// may append to the log it is scanning. fn must not modify the slice.
func (m *Memory) Scan(agent string, fn func(seq uint64, rec []byte) error) error {
	l, err := m.log(agent)
	if err != nil {
		return err
	}
	// Records below len are never written again, and a later append writes
	// only beyond len (or into a new array), so the snapshot is safe to read
	// without the lock.
	return l.scan(0, fn)
}

// ScanFrom implements FromScanner.
func (m *Memory) ScanFrom(agent string, from uint64, fn func(seq uint64, rec []byte) error) error {
	l, err := m.log(agent)
	if err != nil {
		return err
	}
	return l.scan(from, fn)
}

func (l *memLog) scan(from uint64, fn func(seq uint64, rec []byte) error) error {
	l.mu.Lock()
	recs := l.recs
	l.mu.Unlock()
	for i := from; i < uint64(len(recs)); i++ {
		if err := fn(i, recs[i]); err != nil {
			return err
		}
	}
	return nil
}

// Agents implements Store.
func (m *Memory) Agents() ([]string, error) {
	if m.closed.Load() {
		return nil, ErrClosed
	}
	var ids []string
	m.logs.Range(func(k, _ any) bool {
		ids = append(ids, k.(string))
		return true
	})
	sort.Strings(ids)
	return ids, nil
}

// Close implements Store. Later calls of any method, Close included, return
// ErrClosed.
func (m *Memory) Close() error {
	if m.closed.Swap(true) {
		return ErrClosed
	}
	return nil
}
