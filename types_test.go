package lineage_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lineage-guard/lineage"
)

// TestAppendTime: AppendTime writes what time's own formatter writes in
// TimeLayout, for the times the runtime holds and beyond.
func TestAppendTime(t *testing.T) {
	times := []time.Time{
		time.Unix(0, 0), time.Unix(0, math.MaxInt64), time.Unix(0, 1), time.Unix(951782400, 999999999), // 2000-02-29
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(-1, 12, 31, 23, 59, 59, 0, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 11, 30, 1, 2, 3, 4, time.FixedZone("x", -7*3600)),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		times = append(times, time.Unix(0, r.Int64()), time.Unix(r.Int64N(400_000_000_000)-200_000_000_000, r.Int64N(1e9)))
	}
	for _, tm := range times {
		want := tm.UTC().Format(lineage.TimeLayout)
		if got := string(lineage.AppendTime([]byte("x"), tm)); got != "x"+want {
			t.Fatalf("AppendTime(%v) = %q, want %q", tm, got, "x"+want)
		}
		if b, _ := (lineage.Time{Time: tm}).MarshalJSON(); string(b) != `"`+want+`"` {
			t.Fatalf("MarshalJSON(%v) = %s, want %q", tm, b, want)
		}
	}
}

// BenchmarkAppendTime: a record's at as AppendTime writes it, beside time's
// own formatter in the same layout.
func BenchmarkAppendTime(b *testing.B) {
	tm := time.Date(2026, 11, 30, 1, 2, 3, 4, time.UTC)
	buf := make([]byte, 0, 64)
	b.Run("AppendTime", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			buf = lineage.AppendTime(buf[:0], tm)
		}
	})
	b.Run("AppendFormat", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			buf = tm.UTC().AppendFormat(buf[:0], lineage.TimeLayout)
		}
	})
}
