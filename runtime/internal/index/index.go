// Package index owns the in-memory form of a store's two indexes (one row per
// agent, one row per pending request; their types are package store's): the
// memory and file stores keep one, the file store saves it beside its logs,
// the runtime builds one by reading every log for a store that keeps none,
// and verify compares the one a store keeps with one read again from the logs
// (Diff). It reads records only through store.IndexChangeOf; nothing decides
// from an index.
package index

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	"github.com/lineage-guard/lineage/runtime/store"
)

// Index is both indexes of a store's logs. It is safe for concurrent use.
type Index struct {
	mu      sync.Mutex
	rows    map[string]*row
	sorted  []string // ids in order; the ids of added are not in it yet
	added   []string
	pending map[string]*store.PendingRow // store.PendingKey → row
	costs   map[string]*store.Costs      // policy digest → costs
}

type row struct {
	store.AgentRow
	count int64 // records seen; -1 once damaged
	size  int64 // bytes of the log seen (file store)
	// reqs maps an agent's pending request ids to their keys in pending.
	reqs map[string]string
}

// New returns an empty Index.
func New() *Index {
	return &Index{rows: map[string]*row{}, pending: map[string]*store.PendingRow{}, costs: map[string]*store.Costs{}}
}

// Create notes a log without records.
func (x *Index) Create(agent string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.row(agent)
}

func (x *Index) row(agent string) *row {
	r := x.rows[agent]
	if r == nil {
		r = &row{AgentRow: store.AgentRow{Agent: agent, Status: store.StatusAlive}}
		x.rows[agent] = r
		x.added = append(x.added, agent)
	}
	return r
}

// Apply notes the records firstSeq... of agent's log, which is now size
// bytes long (the file store; 0 leaves the size alone).
func (x *Index) Apply(agent string, firstSeq uint64, size int64, recs [][]byte) {
	x.mu.Lock()
	defer x.mu.Unlock()
	r := x.row(agent)
	if size > 0 {
		r.size = size
	}
	for i, rec := range recs {
		x.applyOne(r, firstSeq+uint64(i), rec)
	}
}

func (x *Index) applyOne(r *row, seq uint64, rec []byte) {
	if r.count < 0 {
		return
	}
	if uint64(r.count) != seq {
		x.damage(r, fmt.Sprintf("store: index %s: record %d after %d records", r.Agent, seq, r.count))
		return
	}
	ch, err := store.IndexChangeOf(r.Agent, seq, rec)
	if err != nil {
		x.damage(r, err.Error())
		return
	}
	r.count++
	r.Seq = seq
	if ch.Name != nil {
		r.Name = *ch.Name
	}
	if ch.Costs != nil {
		r.Digest = ch.Digest
		if _, ok := x.costs[ch.Digest]; !ok {
			x.costs[ch.Digest] = ch.Costs
		}
	}
	if ch.Terminated {
		r.Status = store.StatusTerminated
		x.dropPending(r)
	}
	if p := ch.AddPending; p != nil && r.Status == store.StatusAlive {
		if c := x.costs[r.Digest]; c != nil {
			p.Cost = c.Cost(p.Tool)
		}
		key := store.PendingKey(r.Agent, seq)
		x.pending[key] = p
		if r.reqs == nil {
			r.reqs = map[string]string{}
		}
		r.reqs[p.RequestID] = key
	}
	if id := ch.RemovePending; id != "" {
		if key, ok := r.reqs[id]; ok {
			delete(x.pending, key)
			delete(r.reqs, id)
		}
	}
}

func (x *Index) dropPending(r *row) {
	for _, key := range r.reqs {
		delete(x.pending, key)
	}
	r.reqs = nil
}

// Damage marks agent's log damaged (why is the row's Error): its pending
// requests leave the list.
func (x *Index) Damage(agent, why string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.damage(x.row(agent), why)
}

func (x *Index) damage(r *row, why string) {
	r.count, r.Status, r.Error = -1, store.StatusDamaged, why
	x.dropPending(r)
}

// Reset forgets what the index knows of agent's log (before it is read anew).
func (x *Index) Reset(agent string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	r := x.row(agent)
	x.dropPending(r)
	r.AgentRow = store.AgentRow{Agent: agent, Status: store.StatusAlive}
	r.count, r.size = 0, 0
}

// Remove forgets agent altogether.
func (x *Index) Remove(agent string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	r := x.rows[agent]
	if r == nil {
		return
	}
	x.dropPending(r)
	delete(x.rows, agent)
	if i, ok := slices.BinarySearch(x.sorted, agent); ok {
		x.sorted = slices.Delete(x.sorted, i, i+1)
	}
	x.added = slices.DeleteFunc(x.added, func(s string) bool { return s == agent })
}

// Seen returns how many records and bytes of agent's log the index has read
// (count -1: the log is damaged); ok is false if it does not know agent.
func (x *Index) Seen(agent string) (count, size int64, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	r := x.rows[agent]
	if r == nil {
		return 0, 0, false
	}
	return r.count, r.size, true
}

// Agents returns the ids of the agents the index knows, in order.
func (x *Index) Agents() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.ids())
}

// Len is the number of agents the index knows.
func (x *Index) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.rows)
}

// ids returns the ids in order, merging those added since the last call.
// The caller holds mu.
func (x *Index) ids() []string {
	if len(x.added) > 0 {
		sort.Strings(x.added)
		merged := make([]string, 0, len(x.sorted)+len(x.added))
		i, j := 0, 0
		for i < len(x.sorted) || j < len(x.added) {
			switch {
			case j == len(x.added) || i < len(x.sorted) && x.sorted[i] < x.added[j]:
				merged = append(merged, x.sorted[i])
				i++
			default:
				if len(merged) == 0 || merged[len(merged)-1] != x.added[j] {
					merged = append(merged, x.added[j])
				}
				j++
			}
		}
		x.sorted, x.added = merged, nil
	}
	return x.sorted
}

// ListAgents implements store.Lister.
func (x *Index) ListAgents(q store.ListQuery) ([]store.AgentRow, string, error) {
	q, err := store.CheckListQuery(q)
	if err != nil {
		return nil, "", err
	}
	after, err := store.DecodeCursor(q.Cursor)
	if err != nil {
		return nil, "", err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	ids := x.ids()
	i := 0
	if after != "" {
		i = sort.SearchStrings(ids, after)
		if i < len(ids) && ids[i] == after {
			i++
		}
	}
	out := []store.AgentRow{}
	for ; i < len(ids) && len(out) < q.Limit; i++ {
		r := x.rows[ids[i]]
		if q.Status != "" && r.Status != q.Status {
			continue
		}
		out = append(out, r.AgentRow)
	}
	next := ""
	if i < len(ids) && len(out) == q.Limit {
		next = store.EncodeCursor(out[len(out)-1].Agent)
	}
	return out, next, nil
}

// ListPending implements store.Lister.
func (x *Index) ListPending(q store.ListQuery) ([]store.PendingRow, string, error) {
	q, err := store.CheckListQuery(q)
	if err != nil {
		return nil, "", err
	}
	after, err := store.DecodeCursor(q.Cursor)
	if err != nil {
		return nil, "", err
	}
	x.mu.Lock()
	keys := make([]string, 0, len(x.pending))
	for k := range x.pending {
		if k > after {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	more := len(keys) > q.Limit
	if more {
		keys = keys[:q.Limit]
	}
	out := make([]store.PendingRow, 0, len(keys))
	for _, k := range keys {
		p := *x.pending[k]
		if r := x.rows[p.Agent]; r != nil {
			p.Name = r.Name
		}
		out = append(out, p)
	}
	x.mu.Unlock()
	next := ""
	if more {
		next = store.EncodeCursor(keys[len(keys)-1])
	}
	return out, next, nil
}

// Snapshot is an Index as the file store saves it (the rows with what was
// read of each log, the policies' costs, the pending requests).
type Snapshot struct {
	Agents  []SnapshotRow           `json:"agents"`
	Costs   map[string]*store.Costs `json:"costs"`
	Pending []store.PendingRow      `json:"pending"`
}

// SnapshotRow is one agent of a Snapshot.
type SnapshotRow struct {
	store.AgentRow
	Count int64 `json:"count"`
	Size  int64 `json:"size"`
}

// Snapshot returns x as it is now.
func (x *Index) Snapshot() Snapshot {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := Snapshot{Costs: maps.Clone(x.costs), Agents: make([]SnapshotRow, 0, len(x.rows))}
	for _, id := range x.ids() {
		r := x.rows[id]
		s.Agents = append(s.Agents, SnapshotRow{AgentRow: r.AgentRow, Count: r.count, Size: r.size})
	}
	for _, p := range x.pending {
		s.Pending = append(s.Pending, *p)
	}
	return s
}

// FromSnapshot makes the Index s describes; ok is false if s cannot be one
// (an invalid agent id, a pending request of an agent it does not list).
func FromSnapshot(s Snapshot) (x *Index, ok bool) {
	x = New()
	for _, r := range s.Agents {
		if store.CheckAgent(r.Agent) != nil {
			return New(), false
		}
		row := x.row(r.Agent)
		row.AgentRow, row.count, row.size = r.AgentRow, r.Count, r.Size
	}
	for d, c := range s.Costs {
		if c != nil {
			x.costs[d] = c
		}
	}
	for i := range s.Pending {
		p := s.Pending[i]
		r := x.rows[p.Agent]
		if r == nil {
			return New(), false
		}
		key := store.PendingKey(p.Agent, p.Seq)
		x.pending[key] = &p
		if r.reqs == nil {
			r.reqs = map[string]string{}
		}
		r.reqs[p.RequestID] = key
	}
	return x, true
}

// Diff lists, one line each, how have differs from want, an index read
// again from the logs (of only agent if not "").
func Diff(have, want *Index, agent string) []string {
	have.mu.Lock()
	defer have.mu.Unlock()
	var out []string
	for id, w := range want.rows {
		h := have.rows[id]
		switch {
		case h == nil:
			out = append(out, fmt.Sprintf("agent %s: missing from the index", id))
		case h.AgentRow != w.AgentRow:
			out = append(out, fmt.Sprintf("agent %s: index has %+v, the log says %+v", id, h.AgentRow, w.AgentRow))
		}
	}
	for id := range have.rows {
		if want.rows[id] == nil && (agent == "" || id == agent) {
			out = append(out, fmt.Sprintf("agent %s: in the index, without a log", id))
		}
	}
	for k, w := range want.pending {
		h := have.pending[k]
		if h == nil || h.RequestID != w.RequestID || h.Tool != w.Tool || h.Cost != w.Cost || h.At != w.At || string(h.Args) != string(w.Args) {
			out = append(out, fmt.Sprintf("agent %s: pending request %q (seq %d) missing or different in the index", w.Agent, w.RequestID, w.Seq))
		}
	}
	for k, h := range have.pending {
		if want.pending[k] == nil && (agent == "" || h.Agent == agent) {
			out = append(out, fmt.Sprintf("agent %s: the index has request %q (seq %d) pending, the log does not", h.Agent, h.RequestID, h.Seq))
		}
	}
	sort.Strings(out)
	return out
}

// Read builds the indexes of st by reading each of its logs: for a store
// that keeps none, and to check one that does.
func Read(st store.Store) (*Index, error) {
	ids, err := st.Agents()
	if err != nil {
		return nil, err
	}
	x := New()
	for _, id := range ids {
		x.Create(id)
		err := st.Scan(id, func(seq uint64, rec []byte) error {
			x.Apply(id, seq, 0, [][]byte{rec})
			return nil
		})
		if err != nil {
			x.Damage(id, err.Error())
		}
	}
	return x, nil
}
