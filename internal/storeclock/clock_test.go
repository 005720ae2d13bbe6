package storeclock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/internal/storeclock"
)

// BenchmarkNow: the cost the store's clock adds to a decision, against the
// local clock's (D354 (the store's clock is every node's)): one atomic load
// and an add; the measuring is in the background.
func BenchmarkNow(b *testing.B) {
	src := func(context.Context) (time.Time, error) { return time.Now().Add(time.Hour), nil }
	c := storeclock.Start(src, storeclock.Options{})
	defer c.Close()
	b.Run("local", func(b *testing.B) {
		for b.Loop() {
			_ = time.Now()
		}
	})
	b.Run("store", func(b *testing.B) {
		for b.Loop() {
			_ = c.Now()
		}
	})
}

// TestOffset: a store an hour ahead is an hour ahead within the bound.
func TestOffset(t *testing.T) {
	src := func(context.Context) (time.Time, error) { return time.Now().Add(time.Hour), nil }
	c := storeclock.Start(src, storeclock.Options{})
	defer c.Close()
	if err := c.Unsynced(); err != nil {
		t.Fatal(err)
	}
	if d := c.Now().Sub(time.Now().Add(time.Hour)); d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("the store's time is off by %s", d)
	}
}

// TestUnreadable: a store whose clock cannot be read makes the clock
// unsynced at the next measurement, saying why; once it can, synced again.
func TestUnreadable(t *testing.T) {
	var failing atomic.Bool
	src := func(context.Context) (time.Time, error) {
		if failing.Load() {
			return time.Time{}, errors.New("the database is away")
		}
		return time.Now(), nil
	}
	c := storeclock.Start(src, storeclock.Options{Every: 10 * time.Millisecond})
	defer c.Close()
	if err := c.Unsynced(); err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	waitFor(t, func() bool {
		err := c.Unsynced()
		return err != nil && strings.Contains(err.Error(), "the database is away")
	})
	failing.Store(false)
	waitFor(t, func() bool { return c.Unsynced() == nil })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not within 5 s")
		}
	}
}
