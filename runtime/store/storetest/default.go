package storetest

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/lineage-guard/lineage/runtime/store"
)

// Default is the contract of package store's sentinels and limits, lists
// included: the one every backend of this module (file, memory, postgres)
// passes.
var Default = Contract{
	ErrExists: store.ErrExists, ErrNotFound: store.ErrNotFound, ErrSeq: store.ErrSeq,
	ErrClosed: store.ErrClosed, ErrBadAgent: store.ErrBadAgent, ErrBadRecord: store.ErrBadRecord,
	MaxAgentID: store.MaxAgentID, MaxRecord: store.MaxRecord,
	Lists: &Lists{
		Agents: func(s Store, cursor string, limit int, status string) (any, string, error) {
			return s.(store.Lister).ListAgents(store.ListQuery{Cursor: cursor, Limit: limit, Status: status})
		},
		Pending: func(s Store, cursor string, limit int) (any, string, error) {
			return s.(store.Lister).ListPending(store.ListQuery{Cursor: cursor, Limit: limit})
		},
	},
}

// BenchRec is a 300-byte record, about the size of a small action record.
var BenchRec = func() []byte {
	b := []byte(`{"seq":0,"kind":"action","body":{"request":{"tool":"pay","args":{"amount":100}}},"pad":"`)
	for len(b) < 300-2 {
		b = append(b, 'x')
	}
	return append(b, `"}`...)
}()

// BenchAppendParallel measures appends of BenchRec by 100 concurrent agents
// (one goroutine each, as the runtime serializes an agent's requests), one
// record per Append. If reset is not nil, it empties an agent's log every
// 4Ki records; if syncs is not nil, it reports the appends per sync it counts.
func BenchAppendParallel(b *testing.B, s Store, reset func(id string), syncs func() (batches, appends int64)) {
	const agents = 100
	procs := runtime.GOMAXPROCS(0)
	par := (agents + procs - 1) / procs // RunParallel starts par*GOMAXPROCS goroutines
	n := par * procs
	for i := range n {
		MustCreate(b, s, fmt.Sprintf("agt_%03d", i))
	}
	var next atomic.Int64
	var batches, reqs int64
	if syncs != nil {
		batches, reqs = syncs()
	}
	b.SetParallelism(par)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := fmt.Sprintf("agt_%03d", next.Add(1)-1)
		for seq := uint64(0); pb.Next(); seq++ {
			if reset != nil && seq == 4096 {
				reset(id)
				seq = 0
			}
			if err := s.Append(id, seq, BenchRec); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	if syncs != nil {
		if nb, nr := syncs(); nb > batches {
			b.ReportMetric(float64(nr-reqs)/float64(nb-batches), "appends/sync")
		}
	}
}
