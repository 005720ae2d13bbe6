package server

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/api"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/server/inbox"
)

// mountInbox serves the approval inbox (docs/inbox.md, package inbox) beside the
// API, on the server's own principals, decisions and event stream.
func (s *Server) mountInbox() {
	h := inbox.New(inbox.Backend{
		Runtime:      s.rt,
		Authenticate: func(token string) (api.Principal, bool) { return s.auth.Load().principal(token) },
		Present:      func(p api.Principal) bool { return s.auth.Load().has(p) },
		Events:       http.HandlerFunc(s.handleEvents),
		Decide: func(ctx context.Context, by, agent, id, note string, approve bool) (lineage.Verdict, error) {
			if err := s.clockErr(); err != nil {
				return lineage.Verdict{}, err
			}
			// The same refusal as the API's: a log below its checkpoint mark
			// is not decided on (D256 (a log below its mark is not decided on)).
			if err := s.checkMark(ctx, agent); err != nil {
				return lineage.Verdict{}, err
			}
			decide := s.rt.Reject
			if approve {
				decide = s.rt.Approve
			}
			return s.decideAs(ctx, api.Principal{Name: by}, agent, id, note, decide)
		},
		Terminate: func(ctx context.Context, by, agent, note string) error {
			if err := s.clockErr(); err != nil {
				return err
			}
			if _, err := s.rt.Terminate(ctx, agent, runtime.Kill{By: by, Note: note}); err != nil {
				return err
			}
			s.announceTermination(agent, lineage.Killed, by)
			return nil
		},
		Verify: s.verifyOf,
		Status: func(err error) (int, string) {
			e := errorOf(err)
			return e.wire.Status, e.wire.Code
		},
		Logger: s.log,
	})
	for _, p := range inbox.Patterns {
		s.mux.Handle(p, s.logged(p, h))
	}
}

// logged gives an inbox route the request log line and the HTTP metrics of
// the API's routes, the route being the pattern without its method.
func (s *Server) logged(pattern string, h http.Handler) http.Handler {
	_, route, _ := strings.Cut(pattern, " ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		took := time.Since(start)
		s.met.http.WithLabelValues(route, strconv.Itoa(sw.status)).Inc()
		s.met.httpTime.WithLabelValues(route).Observe(took.Seconds())
		s.log.Info("request", "method", r.Method, "route", route, "path", r.URL.Path, "status", sw.status, "duration", took)
	})
}
