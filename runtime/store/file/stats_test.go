package file

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestSyncHistogramBuckets: every duration falls in a bucket whose range
// holds it and spans at most 1/8 of it, and buckets tile the line in order.
func TestSyncHistogramBuckets(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 100_000; i++ {
		ns := int64(r.Uint64() >> (1 + r.IntN(63)))
		b := bucketOf(ns)
		low := int64(0)
		if b > 0 {
			low = bucketTop(b-1) + 1
		}
		if ns < low || ns > bucketTop(b) {
			t.Fatalf("%d ns in bucket %d, which holds [%d, %d]", ns, b, low, bucketTop(b))
		}
		if width := bucketTop(b) - low + 1; ns >= 8 && width > ns/8+1 {
			t.Fatalf("%d ns: bucket %d is %d ns wide, more than 1/8", ns, b, width)
		}
	}
}

// TestSyncHistogramPercentiles against exact percentiles of a known sample.
func TestSyncHistogramPercentiles(t *testing.T) {
	var h syncHistogram
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 501 * time.Microsecond}, {99, 991 * time.Microsecond}, {100, 1000 * time.Microsecond}} {
		got := h.percentile(c.p, 1000)
		if got < c.want || got > c.want+c.want/8 {
			t.Errorf("p%v = %v, want %v to within 1/8", c.p, got, c.want)
		}
	}
	if got := h.percentile(50, 0); got != 0 {
		t.Errorf("percentile of nothing = %v", got)
	}
}

// TestCommitStatsCount: the stats count every sync and append of a file store.
func TestCommitStatsCount(t *testing.T) {
	s := openFile(t, t.TempDir(), Options{})
	defer s.Close()
	mustCreate(t, s, "agt_a")
	for seq := uint64(0); seq < 5; seq++ {
		if err := s.Append("agt_a", seq, rec("agt_a", seq)); err != nil {
			t.Fatal(err)
		}
	}
	st := s.CommitStats()
	// The last four appends, one at a time: the first records are synced on
	// their own and renamed into place, and Create syncs nothing (D41: crash-safe create).
	if st.Syncs != 4 || st.Appends != 4 {
		t.Errorf("stats %+v: want 4 syncs covering 4 requests", st)
	}
	if st.SyncP50 <= 0 || st.SyncP99 < st.SyncP50 || st.SyncMax < st.SyncP99 {
		t.Errorf("stats %+v: want 0 < p50 <= p99 <= max", st)
	}
}
