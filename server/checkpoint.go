package server

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/checkpoint"
)

// This file serves provable history (docs/history.md): the signed checkpoint of an
// agent's log at GET /v1/agents/{agent}/checkpoint and an inclusion proof of
// one record at GET /v1/agents/{agent}/proof/{seq}, when the server has a
// checkpoint key (Config.CheckpointSigner, `serve --checkpoint-key`).
//
// A checkpoint is signed when one is asked for (a checkpoint or a proof) and
// the log grew since the last one (D151): from the log as the runtime's
// strict verifier reads it then. Ed25519 signatures are deterministic, so the
// note is the one signing at each append would have made. The server keeps
// the last checkpoint it signed of each agent and refuses to sign, or to
// prove against, a log that is not an extension of it (D152): a log rewritten
// while the server runs is named, not signed.

// Error codes of the checkpoint routes.
const (
	// CodeNoCheckpointKey: the server was started without --checkpoint-key.
	CodeNoCheckpointKey = "no_checkpoint_key"
	// CodeUnknownRecord: a proof of a seq the log (or the asked tree) does not have.
	CodeUnknownRecord = "unknown_record"
	// CodeCheckpointDiverged: the log is no longer an extension of the last
	// checkpoint this server signed (a rewrite or a truncation of its store).
	CodeCheckpointDiverged = "checkpoint_diverged"
)

// signedLogs is the last checkpoint signed of each agent, in memory.
type signedLogs struct {
	m sync.Map // agent id → *signedLog
}

// signedLog is an agent's last signed checkpoint and its note: a few hundred
// bytes an agent, never its records (a proof reads them).
type signedLog struct {
	mu   sync.Mutex // held from reading the log to remembering its checkpoint
	last *checkpoint.Checkpoint
	note []byte
}

func (l *signedLogs) of(agent string) *signedLog {
	v, _ := l.m.LoadOrStore(agent, &signedLog{})
	return v.(*signedLog)
}

// sign brings sl up to the agent's log; call with sl.mu held. Unless read
// is set, a log as long as the last checkpoint (the runtime's head seq, from
// memory) keeps it and nil records are returned: the store is read and
// verified only when the log grew (D151). A log read must extend the last
// checkpoint (D152); it is returned.
func (s *Server) sign(r *http.Request, agent string, sl *signedLog, read bool) ([]lineage.Record, error) {
	if s.cfg.CheckpointSigner == nil {
		return nil, newError(http.StatusNotImplemented, CodeNoCheckpointKey,
			"this server signs no checkpoints: start it with lineagec serve --checkpoint-key FILE (a key from lineagec key generate)")
	}
	if sl.last != nil && !read {
		info, err := s.rt.Info(r.Context(), agent)
		if err != nil {
			return nil, err
		}
		if info.Seq+1 == sl.last.Size {
			return nil, nil
		}
	}
	recs, err := s.rt.Records(agent)
	if err != nil {
		return nil, err
	}
	if len(recs) < 2 {
		return nil, newError(http.StatusInternalServerError, CodeCorrupt, fmt.Sprintf("agent %s: the log ends before its policy record", agent))
	}
	s.touched(agent)
	if sl.last != nil {
		if res := checkpoint.Verify(recs, *sl.last, nil); !res.OK {
			s.log.Error("checkpoint: the log no longer extends the last signed checkpoint", "agent", agent,
				"checkpoint_size", sl.last.Size, "records", len(recs), "reason", res.Reason)
			return nil, newError(http.StatusInternalServerError, CodeCheckpointDiverged, fmt.Sprintf(
				"agent %s: the log of %d records is not an extension of the checkpoint of %d records this server signed (head %s): %s",
				agent, len(recs), sl.last.Size, sl.last.Head, res.Reason))
		}
	}
	if sl.last != nil && sl.last.Size == uint64(len(recs)) {
		return recs, nil // the same log (Verify said so): the same note
	}
	c, err := checkpoint.New(recs)
	if err != nil {
		return nil, err
	}
	note, err := checkpoint.Sign(c, s.cfg.CheckpointSigner)
	if err != nil {
		return nil, err
	}
	sl.last, sl.note = &c, note
	return recs, nil
}

func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request, _ Principal) error {
	agent := r.PathValue("agent")
	if len(r.URL.Query()) > 0 {
		return newError(http.StatusBadRequest, CodeBadRequest, "the checkpoint takes no query parameters")
	}
	sl := s.ckpts.of(agent)
	sl.mu.Lock()
	_, err := s.sign(r, agent, sl, false)
	note := sl.note
	sl.mu.Unlock()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(note)
	return err
}

func (s *Server) proof(w http.ResponseWriter, r *http.Request, _ Principal) error {
	agent, seqText := r.PathValue("agent"), r.PathValue("seq")
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil || strconv.FormatUint(seq, 10) != seqText {
		return newError(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("seq %q: a record seq, 0 or more, in decimal", seqText))
	}
	var size uint64
	q := r.URL.Query()
	for k := range q {
		if k != "size" {
			return newError(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("unknown query parameter %q (only size)", k))
		}
	}
	if ss := q.Get("size"); ss != "" {
		n, err := strconv.ParseUint(ss, 10, 64)
		if err != nil || n == 0 || strconv.FormatUint(n, 10) != ss {
			return newError(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("size=%q: the tree size of a checkpoint, 1 or more", ss))
		}
		size = n
	}
	sl := s.ckpts.of(agent)
	sl.mu.Lock()
	recs, err := s.sign(r, agent, sl, true)
	sl.mu.Unlock()
	if err != nil {
		return err
	}
	n := uint64(len(recs))
	switch {
	case size > n:
		return newError(http.StatusNotFound, CodeUnknownRecord, fmt.Sprintf("size=%d: agent %s has %d records", size, agent, n))
	case size == 0 && seq >= n:
		return newError(http.StatusNotFound, CodeUnknownRecord, fmt.Sprintf("agent %s has no record %d: its log has %d records (seq 0..%d)", agent, seq, n, n-1))
	case size > 0 && seq >= size:
		return newError(http.StatusNotFound, CodeUnknownRecord, fmt.Sprintf("record %d is not in the tree of size %d (seq 0..%d)", seq, size, size-1))
	}
	p, err := checkpoint.InclusionProof(recs, seq, size)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, p)
}
