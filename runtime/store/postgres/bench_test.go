package postgres

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lineage-guard/lineage/runtime/store/postgres/pgtest"
	"github.com/lineage-guard/lineage/runtime/store/storetest"
)

// benchRec is a 300-byte record, the size of the file store's benchmark
// record (about a small action record).
var benchRec = []byte(`{"pad":"` + strings.Repeat("x", 290) + `"}`)

// BenchmarkAppendParallel measures durable appends (committed with
// synchronous_commit on, on a server with fsync on) by 100 concurrent agents,
// one goroutine each, one 300-byte record per Append, with 2 (the default,
// D174 (two group commits in flight)), 4 and 8 group commits in flight.
func BenchmarkAppendParallel(b *testing.B) {
	for _, committers := range []int{2, 4, 8} {
		b.Run(fmt.Sprintf("committers=%d", committers), func(b *testing.B) {
			s, err := Open(context.Background(), pgtest.URL(b), Options{Committers: committers})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			benchAppends(b, s)
		})
	}
}

func benchAppends(b *testing.B, s *Store) {
	const agents = 100
	procs := runtime.GOMAXPROCS(0)
	par := (agents + procs - 1) / procs // RunParallel starts par*GOMAXPROCS goroutines
	for i := range par * procs {
		storetest.MustCreate(b, s, fmt.Sprintf("agt_%03d", i))
	}
	var next atomic.Int64
	g0, a0 := s.groups.Load(), s.appends.Load()
	b.SetParallelism(par)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := fmt.Sprintf("agt_%03d", next.Add(1)-1)
		for seq := uint64(0); pb.Next(); seq++ {
			if err := s.Append(id, seq, benchRec); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	if g := s.groups.Load() - g0; g > 0 {
		b.ReportMetric(float64(s.appends.Load()-a0)/float64(g), "appends/commit")
	}
}
