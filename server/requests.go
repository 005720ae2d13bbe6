package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/api"
)

// The request routes: decide a request, read its verdict (held with
// ?wait= while it is pending), and tell the streams.

// requestBody is a request as an agent sends it (api.RequestBody); At is
// only there to be refused.
type requestBody struct {
	api.RequestBody `json:",inline"`
	At              json.RawMessage `json:"at"`
}

func (s *Server) request(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	agent := r.PathValue("agent")
	var b requestBody
	if err := readBody(w, r, &b); err != nil {
		return badRequest(err)
	}
	if b.At != nil {
		return newError(api.CodeBadRequest, "/at: the server's clock gives the time of a request; leave at out")
	}
	if err := s.checkMark(r.Context(), agent); err != nil {
		return err
	}
	start := time.Now()
	v, err := s.rt.Request(r.Context(), agent, lineage.Request{ID: b.ID, Tool: b.Tool, Args: b.Args})
	if err != nil {
		return err
	}
	s.met.decided(v, time.Since(start))
	if v.Decision == lineage.Pending && v.Seq > 0 {
		s.hub.publish(event{api.EventPending, map[string]any{"agent": agent, "name": s.name(r.Context(), agent),
			"request_id": v.RequestID, "tool": b.Tool, "args": argsOrEmpty(b.Args), "verdict": v}})
	}
	s.announceTermination(agent, v.Terminated, "")
	return writeJSON(w, http.StatusOK, v)
}

func argsOrEmpty(a map[string]any) map[string]any {
	if a == nil {
		return map[string]any{}
	}
	return a
}

// announceTermination tells the streams and the waiters that an agent ended.
func (s *Server) announceTermination(agent string, reason lineage.Termination, by string) {
	if reason == "" {
		return
	}
	data := map[string]any{"agent": agent, "reason": reason}
	if by != "" {
		data["by"] = by
	}
	s.hub.publish(event{api.EventTerminated, data})
	s.hub.wake(agent, "")
}

func (s *Server) name(ctx context.Context, agent string) string {
	if n, ok := s.names.Load(agent); ok {
		return n.(string)
	}
	info, err := s.rt.Info(ctx, agent)
	if err != nil {
		return ""
	}
	s.names.Store(agent, info.Name)
	return info.Name
}

func (s *Server) getRequest(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	agent, id := r.PathValue("agent"), r.PathValue("id")
	var wait time.Duration
	q := r.URL.Query()
	for k := range q {
		if k != "wait" {
			return newError(api.CodeBadRequest, fmt.Sprintf("unknown query parameter %q (only wait)", k))
		}
	}
	if ws := q.Get("wait"); ws != "" {
		d, err := time.ParseDuration(ws)
		if err != nil || d < 0 || d > MaxWait {
			return newError(api.CodeBadRequest, fmt.Sprintf("wait=%q: a duration such as 30s, at most %s", ws, MaxWait))
		}
		wait = d
	}
	// Watch before reading, so a decision between the two is not missed.
	var woken <-chan struct{}
	if wait > 0 {
		ch, cancel := s.hub.watch(agent, id)
		defer cancel()
		woken = ch
	}
	v, err := s.rt.RequestVerdict(r.Context(), agent, id)
	if err != nil {
		return err
	}
	if v.Decision == lineage.Pending && wait > 0 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-woken:
		case <-timer.C:
		case <-r.Context().Done():
			return r.Context().Err()
		}
		if v, err = s.rt.RequestVerdict(r.Context(), agent, id); err != nil {
			return err
		}
	}
	return writeJSON(w, http.StatusOK, v)
}
