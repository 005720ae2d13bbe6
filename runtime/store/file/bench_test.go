package store

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
)

// benchRec is a 300-byte record, about the size of a small action record.
var benchRec = func() []byte {
	b := []byte(`{"seq":0,"kind":"action","body":{"request":{"tool":"pay","args":{"amount":100}}},"pad":"`)
	b = append(b, bytes.Repeat([]byte("x"), 300-len(b)-2)...)
	return append(b, `"}`...)
}()

// BenchmarkMemoryAppend appends 300-byte records to one agent. It starts a new
// store every 64Ki records: one log of millions of records would measure the
// garbage collector's walk of a multi-gigabyte heap, not Append.
func BenchmarkMemoryAppend(b *testing.B) {
	const rotate = 1 << 16
	var m *Memory
	b.ReportAllocs()
	seq, total := uint64(rotate), 0
	for b.Loop() {
		if seq == rotate {
			m, seq = NewMemory(), 0
			mustCreate(b, m, "agt_a")
		}
		if err := m.Append("agt_a", seq, benchRec); err != nil {
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
	m := NewMemory()
	benchParallel(b, m, nil, func(id string) {
		m.logs.Store(id, new(memLog))
	})
}

// BenchmarkFileAppendParallel measures durable appends by 100 concurrent
// agents (one goroutine each, as the runtime serializes an agent's
// requests), one 300-byte record per Append, for each sync mode.
func BenchmarkFileAppendParallel(b *testing.B) {
	for _, mode := range syncModes {
		b.Run(mode.String(), func(b *testing.B) {
			s := openFile(b, b.TempDir(), FileOptions{Sync: mode})
			defer s.Close()
			benchParallel(b, s, s.commit, nil)
		})
	}
}

// benchParallel appends benchRec from 100 goroutines, each to its own agent.
// If reset is not nil, it empties an agent's log every 4Ki records.
func benchParallel(b *testing.B, s Store, c *committer, reset func(id string)) {
	const agents = 100
	procs := runtime.GOMAXPROCS(0)
	par := (agents + procs - 1) / procs // RunParallel starts par*GOMAXPROCS goroutines
	n := par * procs
	for i := range n {
		mustCreate(b, s, fmt.Sprintf("agt_%03d", i))
	}
	var next atomic.Int64
	var batches, reqs int64
	if c != nil {
		batches, reqs = c.batches.Load(), c.reqs.Load()
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
			if err := s.Append(id, seq, benchRec); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	if c != nil {
		if nb := c.batches.Load() - batches; nb > 0 {
			b.ReportMetric(float64(c.reqs.Load()-reqs)/float64(nb), "appends/sync")
		}
	}
}

// BenchmarkFileScan reads a log of 100,000 300-byte records.
func BenchmarkFileScan(b *testing.B) {
	const n = 100_000
	dir := b.TempDir()
	f, err := os.Create(filepath.Join(dir, "agt_a"+Ext))
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for range n {
		w.Write(benchRec)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	s := openFile(b, dir, FileOptions{})
	defer s.Close()
	count := func() {
		k := 0
		if err := s.Scan("agt_a", func(uint64, []byte) error { k++; return nil }); err != nil || k != n {
			b.Fatalf("Scan: %d records, %v", k, err)
		}
	}
	count() // opens the file and learns its length
	b.SetBytes(n * int64(len(benchRec)+1))
	b.ReportAllocs()
	for b.Loop() {
		count()
	}
	b.ReportMetric(float64(b.N)*n/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkFileCreate: a create as the runtime makes one (Create, then one
// Append of genesis and policy), durable when it returns.
func BenchmarkFileCreate(b *testing.B) {
	s, err := OpenFile(b.TempDir(), FileOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("agt_%08d", i)
		if err := s.Create(id); err != nil {
			b.Fatal(err)
		}
		if err := s.Append(id, 0, rec(id, 0), rec(id, 1)); err != nil {
			b.Fatal(err)
		}
	}
}
