package file

import (
	"container/list"
	"sync"
)

// handles bounds the number of open log files: a deployment may have far more
// agents than the process may have descriptors. Logs are kept in LRU order;
// opening one more than max closes the least recently used idle ones.
//
// Lock order: a fileLog's mu, then handles.mu, then (TryLock only) another
// fileLog's mu, so eviction never waits for a busy log: it skips it.
type handles struct {
	mu  sync.Mutex
	max int
	lru list.List // of *fileLog, most recently used first
}

// add records that l (whose mu the caller holds) has just opened l.f.
func (h *handles) add(l *fileLog) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lru.Len() == 0 {
		h.lru.Init()
	}
	l.elem = h.lru.PushFront(l)
	for tries, e := 0, h.lru.Back(); e != nil && h.lru.Len() > h.max && tries < 16; tries++ {
		prev := e.Prev()
		if v := e.Value.(*fileLog); v != l && v.mu.TryLock() {
			if v.refs == 0 && v.f != nil {
				// Nothing to lose: no append is in progress (it holds mu), and
				// a writeback error of this file still reaches the next sync:
				// syncfs reports the file system's errors, and in SyncFiles
				// mode the file is synced on its own descriptor before any
				// append returns.
				_ = v.f.Close()
				v.f = nil
				h.lru.Remove(e)
				v.elem = nil
			}
			v.mu.Unlock()
		}
		e = prev
	}
}

// touch marks l (whose mu the caller holds) as just used.
func (h *handles) touch(l *fileLog) {
	h.mu.Lock()
	if l.elem != nil && h.lru.Front() != l.elem {
		h.lru.MoveToFront(l.elem)
	}
	h.mu.Unlock()
}

// remove forgets l (whose mu the caller holds); the caller closes l.f.
func (h *handles) remove(l *fileLog) {
	h.mu.Lock()
	if l.elem != nil {
		h.lru.Remove(l.elem)
		l.elem = nil
	}
	h.mu.Unlock()
}

// open reports how many log files are open.
func (h *handles) open() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lru.Len()
}
