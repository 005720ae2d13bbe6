// Package memory owns the store that keeps every log in memory: a
// store.Store, with the lists of store.Lister, for tests and benchmarks.
// Nothing survives the process.
package memory

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/lineage-guard/lineage/runtime/internal/index"
	"github.com/lineage-guard/lineage/runtime/store"
)

// Store is a store.Store that keeps every log in memory, for tests and benchmarks.
// Nothing survives the process; "durable" means "appended".
//
// Agents do not contend with each other: the logs live in a sync.Map and each
// has its own mutex. Append keeps the records it is given (Store lets it): the
// runtime allocates each line for the log, so a copy would be pure cost.
type Store struct {
	logs    sync.Map // agent id → *memLog
	closed  atomic.Bool
	shared  bool
	idxOnce sync.Once
	idxv    *index.Index // the indexes (store.Lister), made on first use
}

func (m *Store) idx() *index.Index {
	m.idxOnce.Do(func() { m.idxv = index.New() })
	return m.idxv
}

var _ store.Lister = (*Store)(nil)

// ListAgents implements store.Lister.
func (m *Store) ListAgents(q store.ListQuery) ([]store.AgentRow, string, error) {
	if m.closed.Load() {
		return nil, "", store.ErrClosed
	}
	return m.idx().ListAgents(q)
}

// ListPending implements store.Lister.
func (m *Store) ListPending(q store.ListQuery) ([]store.PendingRow, string, error) {
	if m.closed.Load() {
		return nil, "", store.ErrClosed
	}
	return m.idx().ListPending(q)
}

type memLog struct {
	mu   sync.Mutex
	recs [][]byte // recs[i] is never modified once appended
}

var _ store.Store = (*Store)(nil)

// New returns an empty in-memory store.
func New() *Store { return &Store{} }

// NewShared returns an empty in-memory store that says it has other
// writers (Shared): several runtimes in one process over it behave as
// guard nodes over one database, for tests of the runtime across nodes.
func NewShared() *Store { return &Store{shared: true} }

// Shared implements store.Shared: true for a store of NewShared.
func (m *Store) Shared() bool { return m.shared }

// Create implements store.Store.
func (m *Store) Create(agent string) error {
	if m.closed.Load() {
		return store.ErrClosed
	}
	if err := store.CheckAgent(agent); err != nil {
		return err
	}
	if _, loaded := m.logs.LoadOrStore(agent, new(memLog)); loaded {
		return fmt.Errorf("%w: %s", store.ErrExists, agent)
	}
	m.idx().Create(agent)
	return nil
}

func (m *Store) log(agent string) (*memLog, error) {
	if m.closed.Load() {
		return nil, store.ErrClosed
	}
	if err := store.CheckAgent(agent); err != nil {
		return nil, err
	}
	v, ok := m.logs.Load(agent)
	if !ok {
		return nil, fmt.Errorf("%w: %s", store.ErrNotFound, agent)
	}
	return v.(*memLog), nil
}

// Append implements store.Store.
func (m *Store) Append(agent string, firstSeq uint64, recs ...[]byte) error {
	l, err := m.log(agent)
	if err != nil {
		return err
	}
	if _, err := store.CheckRecords(agent, firstSeq, recs); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := uint64(len(l.recs)); n != firstSeq {
		return store.SeqError(agent, "", firstSeq, n)
	}
	for _, r := range recs {
		l.recs = append(l.recs, r[:len(r):len(r)])
	}
	m.idx().Apply(agent, firstSeq, 0, recs) // under l.mu: in the log's order
	return nil
}

// Scan implements store.Store. It sees the records appended before it started; fn
// may append to the log it is scanning. fn must not modify the slice.
func (m *Store) Scan(agent string, fn func(seq uint64, rec []byte) error) error {
	l, err := m.log(agent)
	if err != nil {
		return err
	}
	// Records below len are never written again, and a later append writes
	// only beyond len (or into a new array), so the snapshot is safe to read
	// without the lock.
	return l.scan(0, fn)
}

// ScanFrom implements store.FromScanner.
func (m *Store) ScanFrom(agent string, from uint64, fn func(seq uint64, rec []byte) error) error {
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

// Agents implements store.Store.
func (m *Store) Agents() ([]string, error) {
	if m.closed.Load() {
		return nil, store.ErrClosed
	}
	var ids []string
	m.logs.Range(func(k, _ any) bool {
		ids = append(ids, k.(string))
		return true
	})
	sort.Strings(ids)
	return ids, nil
}

// Close implements store.Store. Later calls of any method, Close included, return
// ErrClosed.
func (m *Store) Close() error {
	if m.closed.Swap(true) {
		return store.ErrClosed
	}
	return nil
}
