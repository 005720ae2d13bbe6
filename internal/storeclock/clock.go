// Package storeclock gives the nodes that share a store one time base, the
// store's (docs/stores.md, "One clock"): a Clock measures its node's offset
// from the database's clock in the background, corrected for the round
// trip, and tells the time as the local clock plus that offset: one atomic
// load and an add, nothing on a decision's path waits for the database. When
// it cannot bound its error within the bound it was given, it says so
// (Unsynced), and the service refuses writes (503 clock_unsynced).
package storeclock

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Source reads the store's clock: the database's clock_timestamp().
type Source func(ctx context.Context) (time.Time, error)

// Options tune a Clock; the zero value is the default.
type Options struct {
	// Local is the node's own clock; nil means time.Now. Tests skew it.
	Local func() time.Time
	// MaxError is the largest error the clock may have and still be used
	// for writes (serve --max-clock-error; default 100 ms).
	MaxError time.Duration
	// Every is how often the offset is measured (default 1 s; at most 10 s
	// apart, docs/stores.md). A measurement older than ten of these no longer
	// bounds the error.
	Every time.Duration
	// Samples is how many round trips a measurement takes (default 3); the
	// one with the shortest round trip counts.
	Samples int
	// Logger is told when the clock falls out of and back into its bound.
	Logger *slog.Logger
}

// Clock is the store's time as a node sees it. It is safe for concurrent use.
type Clock struct {
	src    Source
	opts   Options
	offset atomic.Int64 // nanoseconds to add to the local clock
	ok     atomic.Bool  // the last measurement was within the bound
	goodAt atomic.Int64 // monotonic nanoseconds since born of the last good measurement
	born   time.Time

	mu     sync.Mutex
	synced bool
	told   bool   // the first measurement was logged
	why    string // why it is not synced
	bound  time.Duration
	stop   context.CancelFunc
	done   chan struct{}
}

// DefaultMaxError is serve's --max-clock-error by default.
const DefaultMaxError = 100 * time.Millisecond

// Start measures the offset once, then every opts.Every in the background
// until Close. It does not fail: a clock it could not measure is unsynced
// and says why.
func Start(src Source, opts Options) *Clock {
	if opts.Local == nil {
		opts.Local = time.Now
	}
	if opts.MaxError <= 0 {
		opts.MaxError = DefaultMaxError
	}
	if opts.Every <= 0 {
		opts.Every = time.Second
	}
	if opts.Samples <= 0 {
		opts.Samples = 3
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Clock{src: src, opts: opts, stop: cancel, done: make(chan struct{}), why: "the store's clock was not measured yet", born: time.Now()}
	c.measure(ctx)
	go c.run(ctx)
	return c
}

// Now is the store's time: the local clock plus the measured offset.
func (c *Clock) Now() time.Time {
	return c.opts.Local().Add(time.Duration(c.offset.Load()))
}

// Offset is what the clock adds to the local clock, and the bound of its
// error as last measured.
func (c *Clock) Offset() (time.Duration, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Duration(c.offset.Load()), c.bound
}

// Unsynced is nil while the clock's error is within its bound, else why not.
// It takes no lock while synced: every write asks it.
func (c *Clock) Unsynced() error {
	if c.ok.Load() {
		age := time.Since(c.born) - time.Duration(c.goodAt.Load())
		if age <= 10*c.opts.Every {
			return nil
		}
		return fmt.Errorf("the node's clock is not synced with the store's: no measurement of its offset for %s (bound %s)",
			age.Round(time.Millisecond), c.opts.MaxError)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Errorf("the node's clock is not synced with the store's: %s (bound %s)", c.why, c.opts.MaxError)
}

// Close stops the measurements.
func (c *Clock) Close() {
	c.stop()
	<-c.done
}

func (c *Clock) run(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(c.opts.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.measure(ctx)
		}
	}
}

// measure takes opts.Samples round trips to the store and keeps the
// shortest: offset = store time − the local midpoint of the round trip,
// error = half the round trip.
func (c *Clock) measure(ctx context.Context) {
	var (
		best    time.Duration = -1
		offset  time.Duration
		lastErr error
	)
	for range c.opts.Samples {
		mctx, cancel := context.WithTimeout(ctx, max(c.opts.Every, time.Second))
		t0 := c.opts.Local()
		db, err := c.src(mctx)
		t1 := c.opts.Local()
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		rtt := t1.Sub(t0) // monotonic: a step of the wall clock does not count
		if best < 0 || rtt < best {
			best, offset = rtt, db.Sub(t0.Add(rtt/2))
		}
	}
	if ctx.Err() != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.synced
	switch {
	case best < 0:
		c.synced, c.why = false, fmt.Sprintf("the store's clock could not be read: %v", lastErr)
	case best/2 > c.opts.MaxError:
		c.synced, c.why = false, fmt.Sprintf("the round trip to the store took %s, so the offset is known only within %s, over the bound", best, best/2)
		c.bound = best / 2
	default:
		c.offset.Store(int64(offset))
		c.synced, c.why, c.bound = true, "", best/2
	}
	if c.synced {
		c.goodAt.Store(int64(time.Since(c.born)))
	}
	c.ok.Store(c.synced)
	first := !c.told
	c.told = true
	switch {
	case (was || first) && !c.synced:
		c.opts.Logger.Error("clock unsynced: writes are refused (503 clock_unsynced)", "why", c.why, "max_clock_error", c.opts.MaxError)
	case (!was || first) && c.synced:
		c.opts.Logger.Info("clock synced with the store", "offset", offset, "error", best/2, "max_clock_error", c.opts.MaxError)
	}
}
