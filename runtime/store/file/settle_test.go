package file

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestSettle: a busy committer sleeps while the CPUs are saturated, and stops
// as soon as they are not, or once settleMax has passed (D422: a busy
// committer waits while the CPUs are saturated). The clock is the test's:
// nothing here is timed.
func TestSettle(t *testing.T) {
	start := time.Unix(0, 0)
	run := func(looks ...bool) (slept int, elapsed time.Duration) {
		clock := start
		i := 0
		saturated := func() bool {
			b := looks[min(i, len(looks)-1)]
			i++
			return b
		}
		slept = settle(saturated, func() time.Time { return clock }, func(d time.Duration) { clock = clock.Add(d) }, settlePoll, settleMax)
		return slept, clock.Sub(start)
	}
	if slept, _ := run(false); slept != 0 {
		t.Errorf("not saturated: slept %d times, want none", slept)
	}
	if slept, _ := run(true, true, true, false, true); slept != 3 {
		t.Errorf("saturated three looks, then not: slept %d times, want 3", slept)
	}
	slept, elapsed := run(true)
	if elapsed < settleMax || elapsed > settleMax+settlePoll {
		t.Errorf("always saturated: settled for %v (%d sleeps), want settleMax (%v)", elapsed, slept, settleMax)
	}
}

// TestSaturated: the run queues read as saturated only with at least as many
// runnable goroutines as Ps. With one P and goroutines spinning, some wait to
// run; with nothing else running, none does.
func TestSaturated(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	q := newRunQueues()
	idle := false // a stray goroutine of another test may be ready once: look a few times
	for range 100 {
		if idle = !q.saturated(); idle {
			break
		}
		runtime.Gosched()
	}
	if !idle {
		t.Fatal("saturated with nothing else to run")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					runtime.Gosched()
				}
			}
		})
	}
	saw := false
	for range 1000 {
		if saw = q.saturated(); saw {
			break
		}
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()
	if !saw {
		t.Fatal("four goroutines ready to run on one P never read as saturated")
	}
}

// TestRunQueuesMetric: the Go this is built with has the run-queue metric the
// committer settles on; without it settling would silently never happen.
func TestRunQueuesMetric(t *testing.T) {
	if _, ok := newRunQueues().runnable(); !ok {
		t.Fatalf("runtime/metrics has no %s", runnableMetric)
	}
}
