package server

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/api"
)

// The news of other nodes (docs/stores.md, "One stream of news"): on a store
// shared by several nodes (Config.News), the appends of the other nodes are
// read from the store as they are committed and told to this node's event
// stream and held requests as its own decisions are: a pending request, a
// decision on one, a termination (D353 (other nodes' news is read from the
// store)).

// startNews listens to the store's news until Close.
func (s *Server) startNews() {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopNews = cancel
	done := make(chan struct{})
	s.newsDone = done
	go func() {
		defer close(done)
		s.cfg.News.Listen(ctx, func(agent string, first, last uint64) { s.news(ctx, agent, first, last) }, func() { s.newsGap(ctx) })
	}()
}

// news reads records first..last of agent, appended by another node, and
// tells of them, if a stream or a held request of agent would hear it.
func (s *Server) news(ctx context.Context, agent string, first, last uint64) {
	if !s.hub.interested(agent) {
		return // no stream open, no request of agent held: nothing to tell
	}
	err := s.rt.ScanLog(ctx, agent, first, func(seq uint64, line []byte) error {
		if seq > last {
			return errStopNews
		}
		var rec lineage.Record
		if json.Unmarshal(line, &rec) != nil {
			return nil // the runtime verifies logs; a news reader only tells
		}
		s.tell(ctx, agent, rec)
		return nil
	})
	if err != nil && !errors.Is(err, errStopNews) {
		s.log.Warn("news of another node", "agent", agent, "first", first, "last", last, "err", err)
	}
}

// tell publishes one record of another node as this node's handlers would.
func (s *Server) tell(ctx context.Context, agent string, rec lineage.Record) {
	switch rec.Kind {
	case lineage.KindAction:
		var b lineage.ActionBody
		if json.Unmarshal(rec.Body, &b) != nil || b.Verdict.Decision != lineage.Pending {
			return
		}
		v := b.Verdict
		if v.Seq == 0 {
			v.Seq = rec.Seq
		}
		s.hub.publish(event{api.EventPending, map[string]any{"agent": agent, "name": s.name(ctx, agent),
			"request_id": b.Request.ID, "tool": b.Request.Tool, "args": argsOrEmpty(b.Request.Args), "verdict": v}})
	case lineage.KindApproval:
		var b lineage.ApprovalBody
		if json.Unmarshal(rec.Body, &b) != nil {
			return
		}
		s.hub.publish(event{api.EventDecided, map[string]any{"agent": agent, "request_id": b.RequestID, "by": b.Approver, "verdict": b.Verdict}})
		s.hub.wake(agent, b.RequestID)
	case lineage.KindTermination:
		var b lineage.TerminationBody
		if json.Unmarshal(rec.Body, &b) != nil {
			return
		}
		s.announceTermination(agent, b.Reason, b.By)
	}
}

// newsGap: news may have been lost. Event streams end (their clients
// reconnect and list /v1/pending, as after falling behind), and every held
// request whose verdict is no longer pending is answered.
func (s *Server) newsGap(ctx context.Context) {
	s.hub.endStreams()
	for _, w := range s.hub.waiting() {
		if v, err := s.rt.RequestVerdict(ctx, w[0], w[1]); err == nil && v.Decision != lineage.Pending {
			s.hub.wake(w[0], w[1])
		}
	}
}

var errStopNews = errors.New("the news is read")
