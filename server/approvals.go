package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/api"
	"github.com/lineage-guard/lineage/runtime"
)

// The approval routes: approve or reject a pending request as the caller,
// with a note (docs/approvals.md), and the pending list.

// noteBody is how the server reads the body approve and reject take
// (api.NoteBody, docs/approvals.md): an optional note, nothing else. The
// approver is the caller, so {"by": …} is an error, not ignored. Note stays
// raw so that null or a number is refused rather than read as no note.
type noteBody struct {
	Note json.RawMessage `json:"note"`
}

// noteOf reads approve's and reject's body, which may be absent or empty: the
// note, "" for none.
func noteOf(w http.ResponseWriter, r *http.Request) (string, error) {
	if r.ContentLength == 0 {
		return "", nil
	}
	var b noteBody
	err := readBody(w, r, &b)
	if err != nil && strings.HasPrefix(err.Error(), "the body is empty") {
		return "", nil
	}
	if err != nil || b.Note == nil {
		return "", err
	}
	var note string
	if b.Note[0] != '"' || json.Unmarshal(b.Note, &note) != nil {
		return "", fmt.Errorf("/note: expected a string of at most %d characters, got %s", runtime.MaxNote, b.Note)
	}
	return note, runtime.CheckNote(note)
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request, p api.Principal) error {
	return s.decidePending(w, r, p, s.rt.Approve)
}

func (s *Server) reject(w http.ResponseWriter, r *http.Request, p api.Principal) error {
	return s.decidePending(w, r, p, s.rt.Reject)
}

func (s *Server) decidePending(w http.ResponseWriter, r *http.Request, p api.Principal,
	decide func(context.Context, string, runtime.Approval) (lineage.Verdict, error)) error {
	agent, id := r.PathValue("agent"), r.PathValue("id")
	note, err := noteOf(w, r)
	if err != nil {
		return badRequest(err)
	}
	if err := s.checkMark(r.Context(), agent); err != nil {
		return err
	}
	v, err := s.decideAs(r.Context(), p, agent, id, note, decide)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

// decideAs approves or rejects as p, then tells the streams and the waiters.
func (s *Server) decideAs(ctx context.Context, p api.Principal, agent, id, note string,
	decide func(context.Context, string, runtime.Approval) (lineage.Verdict, error)) (lineage.Verdict, error) {
	start := time.Now()
	v, err := decide(ctx, agent, runtime.Approval{RequestID: id, By: p.Name, Note: note})
	if err != nil {
		return v, err
	}
	s.met.decided(v, time.Since(start))
	s.hub.publish(event{api.EventDecided, map[string]any{"agent": agent, "request_id": id, "by": p.Name, "verdict": v}})
	s.hub.wake(agent, id)
	s.announceTermination(agent, v.Terminated, "")
	return v, nil
}

func (s *Server) pending(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	q, err := listQuery(r, false)
	if err != nil {
		return err
	}
	list, next, err := s.rt.ListPending(q)
	if err != nil {
		return listError(err)
	}
	rows := make([]api.Pending, 0, len(list))
	for _, p := range list {
		rows = append(rows, PendingOf(p))
	}
	return writeJSON(w, http.StatusOK, listBody{"pending": rows, "next_cursor": nextCursor(next)})
}

// PendingOf is a row of the store's pending index as the wire gives it: the
// one conversion of GET /v1/pending and of lineagec pending on a local
// store, so that both hops show a request alike (args {} where it has none).
func PendingOf(p runtime.PendingRow) api.Pending {
	return api.Pending{Agent: p.Agent, Name: p.Name, RequestID: p.RequestID,
		Tool: p.Tool, Args: argsOrEmpty(p.Args), At: lineage.Time{Time: p.At}, Cost: p.Cost}
}
