package file

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/lineage-guard/lineage/runtime/store/storetest"
)

var benchRec = storetest.BenchRec

// BenchmarkFileAppendParallel measures durable appends by 100 concurrent
// agents (one goroutine each, as the runtime serializes an agent's
// requests), one 300-byte record per Append, for each sync mode.
func BenchmarkFileAppendParallel(b *testing.B) {
	for _, mode := range syncModes {
		b.Run(mode.String(), func(b *testing.B) {
			s := openFile(b, b.TempDir(), Options{Sync: mode})
			defer s.Close()
			storetest.BenchAppendParallel(b, s, nil, func() (int64, int64) {
				return s.commit.batches.Load(), s.commit.reqs.Load()
			})
		})
	}
}

// BenchmarkFileAppendLone is one agent appending alone, one durable
// 300-byte record at a time (the guard at one connection): the latency of a
// sync plus what the store adds to it.
func BenchmarkFileAppendLone(b *testing.B) {
	s := openFile(b, b.TempDir(), Options{})
	defer s.Close()
	if err := s.Create("agt_a"); err != nil {
		b.Fatal(err)
	}
	if err := s.Append("agt_a", 0, benchRec); err != nil {
		b.Fatal(err)
	}
	seq := uint64(1)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Append("agt_a", seq, benchRec); err != nil {
			b.Fatal(err)
		}
		seq++
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
	s := openFile(b, dir, Options{})
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
	s, err := Open(b.TempDir(), Options{})
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
