package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// event is one server-sent event: pending, decided or terminated.
type event struct {
	Type string
	Data any
}

// hub fans events out to the SSE streams and wakes the requests that wait for
// a decision (?wait=). The events of this node's own handlers, and on a
// shared store the news of the other nodes (news.go).
type hub struct {
	mu      sync.Mutex
	subs    map[chan event]struct{}
	waiters map[string]map[chan struct{}]string // agent → waiter → request id
	closed  bool
	done    chan struct{}
}

func newHub() *hub {
	return &hub{subs: map[chan event]struct{}{}, waiters: map[string]map[chan struct{}]string{}, done: make(chan struct{})}
}

// subscribe returns a stream of events; it is closed when the hub closes or
// the subscriber falls too far behind (it reconnects and lists /v1/pending).
func (h *hub) subscribe() (chan event, func()) {
	ch := make(chan event, 256)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(ch)
		return ch, func() {}
	}
	h.subs[ch] = struct{}{}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
	}
}

func (h *hub) publish(ev event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- ev:
		default: // too slow: end its stream rather than block a decision
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// watch returns a channel closed when the request is decided or its agent terminated.
func (h *hub) watch(agent, request string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(ch)
		return ch, func() {}
	}
	m := h.waiters[agent]
	if m == nil {
		m = map[chan struct{}]string{}
		h.waiters[agent] = m
	}
	m[ch] = request
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if m := h.waiters[agent]; m != nil {
			if _, ok := m[ch]; ok {
				delete(m, ch)
				close(ch)
			}
			if len(m) == 0 {
				delete(h.waiters, agent)
			}
		}
	}
}

// wake ends the waits for one request of agent, or for all when request is "".
func (h *hub) wake(agent, request string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch, id := range h.waiters[agent] {
		if request == "" || id == request {
			delete(h.waiters[agent], ch)
			close(ch)
		}
	}
}

// endStreams ends every stream (its client reconnects and lists /v1/pending).
func (h *hub) endStreams() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		delete(h.subs, ch)
		close(ch)
	}
}

// interested says whether any stream or any held request of agent would
// hear of it: news no one would hear is not read (news.go).
func (h *hub) interested(agent string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs) > 0 || len(h.waiters[agent]) > 0
}

// waiting lists the held requests: agent and request id of each.
func (h *hub) waiting() [][2]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out [][2]string
	for agent, m := range h.waiters {
		for _, id := range m {
			out = append(out, [2]string{agent, id})
		}
	}
	return out
}

// close ends every stream and every wait (shutdown).
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	close(h.done)
	for ch := range h.subs {
		close(ch)
	}
	h.subs = nil
	for _, m := range h.waiters {
		for ch := range m {
			close(ch)
		}
	}
	h.waiters = map[string]map[chan struct{}]string{}
}

// keepAlive is how often an idle stream gets a comment line.
const keepAlive = 15 * time.Second

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a stream has no end
	ch, cancel := s.hub.subscribe()
	defer cancel()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": lineage events\n\n")
	if err := rc.Flush(); err != nil {
		return
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		case ev, ok := <-ch:
			if !ok {
				return
			}
			data, err := json.Marshal(ev.Data)
			if err != nil {
				continue
			}
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.Type, data)
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}
