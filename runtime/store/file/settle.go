package file

import (
	"runtime"
	"runtime/metrics"
	"time"
)

// Settling: a committer that takes batches back to back (busy, under load)
// first lets the goroutines that are ready to run do so while the CPUs are
// saturated (at least as many goroutines wait to run as there are Ps), for at
// most settleMax, and only then takes the next batch (D422: a busy committer
// waits while the CPUs are saturated). Those goroutines are mostly the
// decisions on their way to an append; syncing before they have appended
// splits them over more syncs, and on this VM each fdatasync costs 65–140 µs
// of CPU, paid again by every small batch. Waiting costs a saturated process
// no throughput (the CPUs are busy meanwhile) and grows the batch. With fewer
// runnable goroutines than Ps the CPUs are about to idle: the committer syncs
// at once (a sleep across an idle moment would last the millisecond Go's
// netpoller waits at the least). A lone append never waits: it leads its own
// batch (D419: a lone append syncs on its own goroutine).

// settleMax bounds a busy committer's wait for the runnable goroutines.
const settleMax = 2 * time.Millisecond

// settlePoll is how long a settling committer sleeps between two looks at
// the run queues: a sleep, not a yield, so that its CPU takes the waiting
// work (runtime.Gosched would put it on the global queue, which a P takes
// before it steals from the other Ps).
const settlePoll = 20 * time.Microsecond

const runnableMetric = "/sched/goroutines/runnable:goroutines"

// runQueues reads how many goroutines of the process are ready to run and
// not running (Go's scheduler, approximate). One per committer: metrics.Read
// writes into its samples.
type runQueues struct {
	sample []metrics.Sample
}

func newRunQueues() *runQueues {
	return &runQueues{sample: []metrics.Sample{{Name: runnableMetric}}}
}

// runnable returns the count; ok is false where the runtime lacks the metric.
func (q *runQueues) runnable() (n uint64, ok bool) {
	metrics.Read(q.sample)
	if q.sample[0].Value.Kind() != metrics.KindUint64 {
		return 0, false
	}
	return q.sample[0].Value.Uint64(), true
}

// saturated says whether at least as many goroutines are ready to run as the
// process has Ps (false where the runtime lacks the metric).
func (q *runQueues) saturated() bool {
	n, ok := q.runnable()
	return ok && n >= uint64(runtime.GOMAXPROCS(0))
}

// settle sleeps poll at a time while saturated holds, until max has passed;
// it returns how many times it slept.
func settle(saturated func() bool, now func() time.Time, sleep func(time.Duration), poll, max time.Duration) int {
	slept := 0
	var deadline time.Time
	for {
		if !saturated() {
			return slept
		}
		t := now()
		if deadline.IsZero() {
			deadline = t.Add(max)
		} else if !t.Before(deadline) {
			return slept
		}
		sleep(poll)
		slept++
	}
}
