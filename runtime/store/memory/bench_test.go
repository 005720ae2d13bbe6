package memory

import (
	"testing"

	"github.com/lineage-guard/lineage/runtime/store/storetest"
)

// BenchmarkMemoryAppend appends 300-byte records to one agent. It starts a new
// store every 64Ki records: one log of millions of records would measure the
// garbage collector's walk of a multi-gigabyte heap, not Append.
func BenchmarkMemoryAppend(b *testing.B) {
	const rotate = 1 << 16
	var m *Store
	b.ReportAllocs()
	seq, total := uint64(rotate), 0
	for b.Loop() {
		if seq == rotate {
			m, seq = New(), 0
			storetest.MustCreate(b, m, "agt_a")
		}
		if err := m.Append("agt_a", seq, storetest.BenchRec); err != nil {
			b.Fatal(err)
		}
		seq++
		total++
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkMemoryAppendParallel is BenchmarkFileAppendParallel's workload on
// the memory store. It goes through the Store interface, whose variadic
// argument costs the caller one allocation of its own.
// Each agent's log is emptied every 4Ki records, for the reason given at
// BenchmarkMemoryAppend.
func BenchmarkMemoryAppendParallel(b *testing.B) {
	m := New()
	storetest.BenchAppendParallel(b, m, func(id string) {
		m.logs.Store(id, new(memLog))
	}, nil)
}
