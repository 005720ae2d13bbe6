package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/api"
	"github.com/lineage-guard/lineage/checkpoint"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
)

// This file serves provable history (docs/history.md): the signed checkpoint of an
// agent's log at GET /v1/agents/{agent}/checkpoint and an inclusion proof of
// one record at GET /v1/agents/{agent}/proof/{seq}, when the server has a
// checkpoint key (Config.CheckpointSigner, `serve --checkpoint-key`).
//
// Checkpoints are signed as logs grow (D200: signed as logs grow): the runtime tells the server of
// each append (runtime.LogWatch), and a signer goroutine per growing agent,
// off the request path, reads the new records from the store, verifies them
// strictly chained to the head of the last checkpoint (D201: the new records, strictly, from the signed head), extends the
// agent's Merkle state (a compact range of O(log n) hashes) and signs, at
// most once per Config.CheckpointInterval (D202: coalesced). A GET serves the latest
// note from memory; it waits only for records acknowledged before it that
// are not signed yet, and asks for them at once (D203: a GET waits for what was acknowledged before it). The server never
// signs a log that does not extend its last checkpoint of the agent, and a
// proof, which reads every record's hash, is refused when they are not the
// signed tree (D152: a log must extend the server's last checkpoint, D204 (a proof from the stored hashes)). An agent's range leaves memory with the agent
// (D205: memory).

// DefaultCheckpointInterval is the least time between two signatures of one
// agent's growing log (Config.CheckpointInterval zero).
const DefaultCheckpointInterval = 100 * time.Millisecond

// signedLogs is what the server keeps of each agent's checkpoints, in memory.
type signedLogs struct {
	m        sync.Map // agent id → *signedLog
	interval time.Duration
	stop     chan struct{}
	signed   atomic.Uint64 // signatures made
	mu       sync.Mutex    // guards closed and wg.Add
	closed   bool
	wg       sync.WaitGroup // the signer goroutines
}

// signedLog is one agent's: its last signed checkpoint and note (a few
// hundred bytes, kept as long as the server runs, for D152 (a log must extend the server's last checkpoint)) and, while the
// runtime holds the agent, its Merkle state.
type signedLog struct {
	agent   string
	grown   atomic.Uint64 // the log's length as the runtime last said (seq+1)
	tried   atomic.Uint64 // grown when the last bring-up began
	running atomic.Bool   // a signer goroutine runs for it
	want    atomic.Uint64 // the longest log a reader waits for
	flush   chan struct{} // cap 1: a reader waits, see want
	drops   atomic.Uint64 // times the agent left the runtime's memory
	state   atomic.Pointer[merkleState]
	last    atomic.Int64 // unix ns of the last bring-up

	mu sync.Mutex // held by whoever brings it up to the log (one at a time)

	pubMu   sync.Mutex
	pub     *published
	changed chan struct{} // closed when pub changes
}

// merkleState is the incremental Merkle state of a log's first size records.
type merkleState struct {
	g    *checkpoint.Growing
	size uint64
	head string
	kind lineage.Kind // of the last record
}

func (m *merkleState) add(seq uint64, hash string, kind lineage.Kind) error {
	if err := m.g.Append(lineage.Record{Seq: seq, Hash: hash}); err != nil {
		return err
	}
	m.size, m.head, m.kind = seq+1, hash, kind
	return nil
}

// published is what readers see: the latest note, or why the last bring-up
// failed (served instead of the note until one succeeds).
type published struct {
	c     checkpoint.Checkpoint
	note  []byte // nil: none signed yet
	err   error
	tried uint64 // the log's length the bring-up was asked to reach
}

func (l *signedLogs) of(agent string) *signedLog {
	if v, ok := l.m.Load(agent); ok {
		return v.(*signedLog)
	}
	v, _ := l.m.LoadOrStore(agent, &signedLog{agent: agent, flush: make(chan struct{}, 1), changed: make(chan struct{})})
	return v.(*signedLog)
}

func (sl *signedLog) snapshot() (*published, chan struct{}) {
	sl.pubMu.Lock()
	defer sl.pubMu.Unlock()
	return sl.pub, sl.changed
}

func (sl *signedLog) publish(p *published) {
	sl.pubMu.Lock()
	sl.pub = p
	close(sl.changed)
	sl.changed = make(chan struct{})
	sl.pubMu.Unlock()
}

// startCheckpoints sets the server up to sign as logs grow (New, with a signer).
func (s *Server) startCheckpoints() {
	s.ckpts.interval = s.cfg.CheckpointInterval
	if s.ckpts.interval <= 0 {
		s.ckpts.interval = DefaultCheckpointInterval
	}
	s.ckpts.stop = make(chan struct{})
	s.watchLogs() // export.go: the one watcher tells the signer and the export
	s.met.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "lineage_checkpoints_signed_total", Help: "Checkpoints signed (serve --checkpoint-key).",
		}, func() float64 { return float64(s.ckpts.signed.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lineage_checkpoint_ranges", Help: "Agents whose Merkle state (a compact range) is in memory.",
		}, func() float64 { return float64(s.checkpointRanges()) }),
	)
}

// stopCheckpoints ends the signer goroutines (Close).
func (s *Server) stopCheckpoints() {
	l := &s.ckpts
	l.mu.Lock()
	if l.closed || l.stop == nil {
		l.mu.Unlock()
		return
	}
	l.closed = true
	close(l.stop)
	l.mu.Unlock()
	l.wg.Wait()
}

func (s *Server) checkpointRanges() int {
	n := 0
	s.ckpts.m.Range(func(_, v any) bool {
		if v.(*signedLog).state.Load() != nil {
			n++
		}
		return true
	})
	return n
}

// appended is the runtime's notice of an append (under the agent's lock):
// note the length and make sure a signer runs.
func (s *Server) appended(agent string, seq uint64) {
	sl := s.ckpts.of(agent)
	for {
		n := sl.grown.Load()
		if n >= seq+1 || sl.grown.CompareAndSwap(n, seq+1) {
			break
		}
	}
	s.kick(sl)
}

// unloaded is the runtime's notice that an agent left memory (under its
// locks): its Merkle state goes too, and is rebuilt when next needed.
func (s *Server) unloaded(agent string) {
	if v, ok := s.ckpts.m.Load(agent); ok {
		sl := v.(*signedLog)
		sl.drops.Add(1)
		sl.state.Store(nil)
	}
}

// kick starts a signer goroutine for sl unless one runs.
func (s *Server) kick(sl *signedLog) {
	if !sl.running.CompareAndSwap(false, true) {
		return
	}
	l := &s.ckpts
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		sl.running.Store(false)
		return
	}
	l.wg.Add(1)
	l.mu.Unlock()
	go s.signLoop(sl)
}

// signLoop brings sl up to its log, at most once per interval unless a
// reader waits for records not signed yet, until no append came in since its
// last bring-up.
func (s *Server) signLoop(sl *signedLog) {
	defer s.ckpts.wg.Done()
	for {
		if !s.coalesce(sl) {
			sl.running.Store(false)
			return
		}
		sl.mu.Lock()
		s.bringUp(sl)
		sl.mu.Unlock()
		sl.running.Store(false)
		if sl.grown.Load() <= sl.tried.Load() || !sl.running.CompareAndSwap(false, true) {
			return
		}
	}
}

// coalesce waits until the interval since sl's last bring-up is over or a
// reader wants records that bring-up did not reach; false: the server closes.
func (s *Server) coalesce(sl *signedLog) bool {
	wait := time.Until(time.Unix(0, sl.last.Load()).Add(s.ckpts.interval))
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return true
		case <-sl.flush:
			if sl.want.Load() > sl.tried.Load() {
				return true
			} // a reader the last bring-up answered: wait on
		case <-s.ckpts.stop:
			return false
		}
	}
}

// bringUp extends sl's Merkle state to the log's end, verifying what it
// reads, signs a checkpoint if the log grew, and publishes the outcome.
// sl.mu is held.
func (s *Server) bringUp(sl *signedLog) {
	target := max(sl.grown.Load(), 1)
	sl.tried.Store(target)
	sl.last.Store(time.Now().UnixNano())
	drops := sl.drops.Load()
	pub, _ := sl.snapshot()
	var last *checkpoint.Checkpoint
	var note []byte
	if pub != nil && pub.note != nil {
		last, note = &pub.c, pub.note
	}
	st, err := s.extend(sl, last, target)
	if err == nil && st.size < target {
		err = newError(api.CodeCheckpointDiverged, fmt.Sprintf(
			"agent %s: the store's log has %d records, the runtime acknowledged %d: it was truncated", sl.agent, st.size, target))
	}
	if err == nil && (last == nil || st.size > last.Size) {
		var c checkpoint.Checkpoint
		if c, err = st.g.Checkpoint(); err == nil {
			var n []byte
			if n, err = checkpoint.Sign(c, s.cfg.CheckpointSigner); err == nil {
				err = s.raiseMark(sl.agent, c)
			}
			if err == nil {
				s.ckpts.signed.Add(1)
				last, note = &c, n
			}
		}
	}
	// The state stays while the runtime holds the agent (D205: memory).
	if err == nil && s.rt.IsLoaded(sl.agent) {
		sl.state.Store(st)
		if sl.drops.Load() != drops {
			sl.state.Store(nil)
		}
	}
	p := &published{note: note, err: err, tried: target}
	if last != nil {
		p.c = *last
	}
	if err != nil {
		var ce *httpError
		if errors.As(err, &ce) && ce.wire.Code == api.CodeCheckpointDiverged {
			s.log.Error("checkpoint: the log no longer extends the last signed checkpoint", "agent", sl.agent, "reason", err.Error())
		}
		if last == nil && errors.Is(err, lineage.ErrUnknownAgent) {
			s.ckpts.m.CompareAndDelete(sl.agent, sl) // keep nothing of a name that is no agent
		}
	}
	sl.publish(p)
}

// extend returns sl's Merkle state brought to the end of the stored log,
// without changing sl's: verified from genesis when the server first meets
// the log, rebuilt from the stored hashes (checked against the last
// checkpoint) when it left memory, and from there the new records verified
// strictly, chained to the head (D201: the new records, strictly, from the signed head).
//
// Past the first meeting only the first upto records are read: the log's length the runtime
// acknowledged, whose records it folded with the checks that span records
// (an approval names a pending request), which a tail verify cannot run. A
// record past it, written to a shared store by another node or by anyone
// else, is signed once this runtime has folded it (D201: the new records, strictly, from the signed head).
func (s *Server) extend(sl *signedLog, last *checkpoint.Checkpoint, upto uint64) (*merkleState, error) {
	agent := sl.agent
	cur := sl.state.Load()
	if last == nil || cur == nil || cur.size < last.Size {
		st := &merkleState{g: checkpoint.NewGrowing(agent)}
		if last == nil { // first meeting: the whole log, strictly
			// The last checkpoint signed before a restart (or by another
			// node of a shared store) bounds it from below (D252 (the
			// signed size checked when an agent is met)).
			var mark store.Mark
			if s.cfg.Marks != nil {
				var err error
				if mark, err = s.cfg.Marks.LoadMark(agent); err != nil {
					return nil, err
				}
			}
			hashes := map[uint64]string{}
			// From genesis the fold's checks all run: to the log's end.
			err := s.rt.VerifyTail(agent, 0, 0, "", "", func(rec lineage.Record) error {
				if mark.Size > 0 && rec.Seq == mark.Size-1 {
					hashes[rec.Seq] = rec.Hash
				}
				return st.add(rec.Seq, rec.Hash, rec.Kind)
			})
			if err != nil {
				return nil, err
			}
			if why := mark.Shortfall(st.size, func(seq uint64) string { return hashes[seq] }); why != "" {
				return nil, newError(api.CodeCheckpointDiverged, fmt.Sprintf("agent %s: %s", agent, why))
			}
			if st.size < 2 {
				return nil, newError(api.CodeCorrupt, fmt.Sprintf("agent %s: the log ends before its policy record", agent))
			}
			return st, nil
		}
		if err := s.rt.ChainHashes(agent, last.Size, st.add); err != nil {
			return nil, err
		}
		if st.size < last.Size {
			return nil, diverged(agent, last, fmt.Sprintf("the log has %d records: truncated", st.size))
		}
		if c, err := st.g.Checkpoint(); err != nil || c.Text() != last.Text() {
			return nil, diverged(agent, last, fmt.Sprintf("its first %d records do not have the signed root: a record at or before seq %d was changed", last.Size, last.Size-1))
		}
		cur = st
	}
	// The new records, strictly, chained to the head; applied only if all pass.
	type leaf struct {
		seq  uint64
		hash string
		kind lineage.Kind
	}
	var tail []leaf
	err := s.rt.VerifyTail(agent, cur.size, upto, cur.head, cur.kind, func(rec lineage.Record) error {
		tail = append(tail, leaf{rec.Seq, rec.Hash, rec.Kind})
		return nil
	})
	var ce *runtime.ChainError
	if errors.As(err, &ce) && ce.Seq == cur.size {
		return nil, diverged(agent, last, fmt.Sprintf("record %d does not follow record %d (%s) of the signed log: %s", ce.Seq, cur.size-1, cur.head, ce.Reason))
	}
	if err != nil {
		return nil, err
	}
	for _, l := range tail {
		if err := cur.add(l.seq, l.hash, l.kind); err != nil {
			return nil, err
		}
	}
	return cur, nil
}

// checkMark refuses (checkpoint_diverged) to decide on a log that does not
// extend the last checkpoint signed of it (D256 (a log below its mark is not
// decided on)): checked the first time the process decides for the agent,
// then remembered.
func (s *Server) checkMark(ctx context.Context, agent string) error {
	if s.cfg.Marks == nil {
		return nil
	}
	if _, ok := s.vetted.Load(agent); ok {
		return nil
	}
	mark, err := s.cfg.Marks.LoadMark(agent)
	if err != nil || mark.Size == 0 {
		if err == nil && s.rt.IsLoaded(agent) {
			// Remembered only for an agent that exists (its first request
			// loads it), so that unknown names fill no memory.
			s.vetted.Store(agent, struct{}{})
		}
		return err
	}
	st, err := s.rt.State(ctx, agent)
	if err != nil {
		return err
	}
	size, atMark := st.Seq+1, st.Head
	if size > mark.Size {
		err := s.rt.ChainHashes(agent, mark.Size, func(seq uint64, hash string, _ lineage.Kind) error {
			if seq == mark.Size-1 {
				atMark = hash
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if why := mark.Shortfall(size, func(uint64) string { return atMark }); why != "" {
		s.log.Error("checkpoint: the log no longer extends the last signed checkpoint", "agent", agent, "reason", why)
		return newError(api.CodeCheckpointDiverged, fmt.Sprintf("agent %s: %s", agent, why))
	}
	s.vetted.Store(agent, struct{}{})
	return nil
}

// raiseMark keeps c's size and head as the agent's mark (Config.Marks)
// before the note is handed out: a checkpoint no restart can forget.
func (s *Server) raiseMark(agent string, c checkpoint.Checkpoint) error {
	if s.cfg.Marks == nil {
		return nil
	}
	if err := s.cfg.Marks.StoreMark(agent, store.Mark{Size: c.Size, Head: c.Head}); err != nil {
		return newError(api.CodeUnavailable, fmt.Sprintf(
			"agent %s: the checkpoint of %d records could not be kept before it is handed out: %v", agent, c.Size, err))
	}
	return nil
}

func diverged(agent string, last *checkpoint.Checkpoint, why string) error {
	return newError(api.CodeCheckpointDiverged, fmt.Sprintf(
		"agent %s: the log is not an extension of the checkpoint of %d records this server signed (head %s): %s",
		agent, last.Size, last.Head, why))
}

// latest returns the agent's latest checkpoint once it covers every record
// the runtime acknowledged before the call (asking the signer for them at
// once), or the error that stopped it.
func (s *Server) latest(ctx context.Context, agent string) (*published, error) {
	if s.cfg.CheckpointSigner == nil {
		return nil, newError(api.CodeNoCheckpointKey,
			"this server signs no checkpoints: start it with lineagec serve --checkpoint-key FILE (a key from lineagec key generate)")
	}
	sl := s.ckpts.of(agent)
	target := max(sl.grown.Load(), 1)
	for {
		pub, changed := sl.snapshot()
		switch {
		case pub != nil && pub.err == nil && pub.note != nil && pub.c.Size >= target:
			return pub, nil
		case pub != nil && pub.err != nil && pub.tried >= target:
			return nil, pub.err
		}
		for w := sl.want.Load(); w < target && !sl.want.CompareAndSwap(w, target); w = sl.want.Load() {
		}
		s.kick(sl)
		select {
		case sl.flush <- struct{}{}:
		default:
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// LatestCheckpoint is the latest note the server signed of agent's log,
// from memory (nil if none yet): what a job that ships checkpoints to a
// witness reads without a request.
func (s *Server) LatestCheckpoint(agent string) []byte {
	v, ok := s.ckpts.m.Load(agent)
	if !ok {
		return nil
	}
	pub, _ := v.(*signedLog).snapshot()
	if pub == nil {
		return nil
	}
	return pub.note
}

func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	agent := r.PathValue("agent")
	if len(r.URL.Query()) > 0 {
		return newError(api.CodeBadRequest, "the checkpoint takes no query parameters")
	}
	pub, err := s.latest(r.Context(), agent)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(pub.note)
	return err
}

func (s *Server) proof(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	agent, seqText := r.PathValue("agent"), r.PathValue("seq")
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil || strconv.FormatUint(seq, 10) != seqText {
		return newError(api.CodeBadRequest, fmt.Sprintf("seq %q: a record seq, 0 or more, in decimal", seqText))
	}
	var size uint64
	q := r.URL.Query()
	for k := range q {
		if k != "size" {
			return newError(api.CodeBadRequest, fmt.Sprintf("unknown query parameter %q (only size)", k))
		}
	}
	if ss := q.Get("size"); ss != "" {
		n, err := strconv.ParseUint(ss, 10, 64)
		if err != nil || n == 0 || strconv.FormatUint(n, 10) != ss {
			return newError(api.CodeBadRequest, fmt.Sprintf("size=%q: the tree size of a checkpoint, 1 or more", ss))
		}
		size = n
	}
	pub, err := s.latest(r.Context(), agent)
	if err != nil {
		return err
	}
	c := pub.c
	n := c.Size
	switch {
	case size > n:
		return newError(api.CodeUnknownRecord, fmt.Sprintf("size=%d: agent %s has %d records", size, agent, n))
	case size == 0 && seq >= n:
		return newError(api.CodeUnknownRecord, fmt.Sprintf("agent %s has no record %d: its log has %d records (seq 0..%d)", agent, seq, n, n-1))
	case size > 0 && seq >= size:
		return newError(api.CodeUnknownRecord, fmt.Sprintf("record %d is not in the tree of size %d (seq 0..%d)", seq, size, size-1))
	}
	// The tree's hashes from the store, chain-checked, never strictly
	// re-verified; they must be the signed tree (D204: a proof from the stored hashes).
	hashes := make([]string, 0, n)
	err = s.rt.ChainHashes(agent, n, func(_ uint64, hash string, _ lineage.Kind) error {
		hashes = append(hashes, hash)
		return nil
	})
	if err != nil { // a short log passes: InclusionProofOf names the truncation
		return err
	}
	p, err := checkpoint.InclusionProofOf(c, hashes, seq, size)
	if errors.Is(err, checkpoint.ErrDiverged) {
		s.log.Error("checkpoint: the log no longer extends the last signed checkpoint", "agent", agent, "reason", err.Error())
		return newError(api.CodeCheckpointDiverged, fmt.Sprintf(
			"agent %s: the log is not the one of the checkpoint of %d records this server signed (head %s): %v", agent, c.Size, c.Head, err))
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, p)
}
