package file

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/lineage-guard/lineage/runtime/store"
)

// syncHistogram counts sync durations in log-linear buckets: 8 per power of
// two of nanoseconds, so a bucket spans 1/8 of its value. Lock-free: the
// committer records, CommitStats reads.
type syncHistogram struct {
	counts [64 * subBuckets]atomic.Int64
	max    atomic.Int64
}

const subBuckets = 8

func bucketOf(ns int64) int {
	if ns < subBuckets {
		return int(max(ns, 0))
	}
	exp := bits.Len64(uint64(ns)) - 1 // ns in [2^exp, 2^(exp+1))
	sub := int(ns>>(exp-3)) & (subBuckets - 1)
	return exp*subBuckets + sub - 2*subBuckets // exp >= 3; keeps the first buckets for 0-7 ns
}

// bucketTop is the largest duration a bucket holds.
func bucketTop(b int) int64 {
	if b < subBuckets {
		return int64(b)
	}
	b += 2 * subBuckets
	exp, sub := b/subBuckets, int64(b%subBuckets)
	return (int64(subBuckets)+sub+1)<<(exp-3) - 1
}

func (h *syncHistogram) record(d time.Duration) {
	ns := int64(d)
	h.counts[bucketOf(ns)].Add(1)
	for {
		m := h.max.Load()
		if ns <= m || h.max.CompareAndSwap(m, ns) {
			return
		}
	}
}

// percentile returns the top of the bucket that holds the p-th percentile.
func (h *syncHistogram) percentile(p float64, total int64) time.Duration {
	if total == 0 {
		return 0
	}
	rank := int64(p / 100 * float64(total))
	if rank >= total {
		rank = total - 1
	}
	var seen int64
	for b := range h.counts {
		seen += h.counts[b].Load()
		if seen > rank {
			return time.Duration(min(bucketTop(b), h.max.Load()))
		}
	}
	return time.Duration(h.max.Load())
}

// CommitStats returns the group commit's counts and sync durations so far.
func (s *Store) CommitStats() store.CommitStats {
	c := s.commit
	var total int64
	for b := range c.syncTimes.counts {
		total += c.syncTimes.counts[b].Load()
	}
	return store.CommitStats{
		Syncs:   c.batches.Load(),
		Appends: c.reqs.Load(),
		SyncP50: c.syncTimes.percentile(50, total),
		SyncP99: c.syncTimes.percentile(99, total),
		SyncMax: time.Duration(c.syncTimes.max.Load()),
	}
}
