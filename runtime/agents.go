package runtime

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"
)

// agentTable holds the agents in memory: a map by id and a list in order of
// last use. With a bound (Options.MaxAgents) it evicts the least recently
// used agents beyond it; with Options.IdleTimeout it evicts agents unused for
// that long, on the next use of the table and by a timer while it is quiet.
// An evicted agent comes back by replaying its log from the store.
//
// Lock order: an agent's mu, then the table's mu, then (TryLock only) another
// agent's mu: eviction never waits for a busy agent, it skips it, and an
// agent that is busy when it would leave stays until a later eviction.
type agentTable struct {
	mu    sync.Mutex
	max   int           // 0: no bound
	idle  time.Duration // 0: no idle eviction
	byID  map[string]*agentSlot
	lru   list.List // of *agentSlot, most recently used first
	timer *time.Timer
	// onLeave, if set, hears of each loaded agent evicted (under mu).
	onLeave func(id string)
}

// agentSlot loads an agent once, however many callers ask at the same time.
type agentSlot struct {
	id    string
	once  sync.Once
	a     *agent
	err   error
	ready atomic.Bool // once has run; only then may the slot be evicted
	used  time.Time   // guarded by the table's mu
	elem  *list.Element
}

func newAgentTable(max int, idle time.Duration) *agentTable {
	t := &agentTable{max: max, idle: idle, byID: map[string]*agentSlot{}}
	t.lru.Init()
	return t
}

// slot returns the slot of id, a new one if it has none, and marks it used.
func (t *agentTable) slot(id string) *agentSlot {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.byID[id]
	if s == nil {
		s = &agentSlot{id: id}
		t.insert(s, now)
	} else {
		s.used = now
		t.lru.MoveToFront(s.elem)
	}
	return s
}

// put makes a new agent's slot, ready, the most recently used.
func (t *agentTable) put(a *agent) {
	s := &agentSlot{id: a.id, a: a}
	a.slot = s
	s.once.Do(func() {})
	s.ready.Store(true)
	t.mu.Lock()
	defer t.mu.Unlock()
	if old := t.byID[a.id]; old != nil {
		t.lru.Remove(old.elem)
	}
	t.insert(s, time.Now())
}

// insert adds s at the front and evicts what the bounds ask. t.mu is held.
func (t *agentTable) insert(s *agentSlot, now time.Time) {
	s.used = now
	s.elem = t.lru.PushFront(s)
	t.byID[s.id] = s
	t.evict(now)
	if t.idle > 0 && t.timer == nil {
		t.timer = time.AfterFunc(t.idle, t.sweep)
	}
}

// remove takes s out of the table if it is still there.
func (t *agentTable) remove(s *agentSlot) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[s.id] == s {
		delete(t.byID, s.id)
		t.lru.Remove(s.elem)
	}
}

// evict drops, from the least recently used end, agents beyond the bound
// and agents idle too long. It looks at a bounded number of busy or loading
// slots before it gives up, so a table of busy agents costs no scan. t.mu is
// held.
func (t *agentTable) evict(now time.Time) {
	skipped := 0
	for e := t.lru.Back(); e != nil && skipped < 16; {
		s := e.Value.(*agentSlot)
		over := t.max > 0 && t.lru.Len() > t.max
		stale := t.idle > 0 && now.Sub(s.used) >= t.idle
		if !over && !stale {
			return
		}
		prev := e.Prev()
		if t.leave(s) {
			delete(t.byID, s.id)
			t.lru.Remove(e)
			if s.a != nil && t.onLeave != nil {
				t.onLeave(s.id)
			}
		} else {
			skipped++
		}
		e = prev
	}
}

// leave marks s's agent gone if no one holds it; a slot still loading, or
// whose agent is busy, stays.
func (t *agentTable) leave(s *agentSlot) bool {
	if !s.ready.Load() {
		return false
	}
	a := s.a
	if a == nil { // its load failed: nothing to unload
		return true
	}
	if !a.mu.TryLock() {
		return false
	}
	a.gone = true
	a.mu.Unlock()
	return true
}

// sweep is the idle timer: it evicts idle agents and runs again when the
// oldest one left would become idle.
func (t *agentTable) sweep() {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.evict(now)
	e := t.lru.Back()
	if e == nil {
		t.timer = nil
		return
	}
	wait := t.idle - now.Sub(e.Value.(*agentSlot).used)
	if wait < time.Millisecond {
		wait = time.Millisecond // the oldest is busy: look again soon
	}
	t.timer.Reset(wait)
}

// len says how many agents are in the table.
func (t *agentTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Len()
}

// loaded returns the agents in the table that are loaded (without error).
func (t *agentTable) loaded() []*agent {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*agent, 0, len(t.byID))
	for _, s := range t.byID {
		if s.ready.Load() && s.a != nil {
			out = append(out, s.a)
		}
	}
	return out
}
