package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/rego"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
)

// The decision-log export (serve --decision-log URL, docs/operations.md,
// "Decision-log export"): every verdict the logs hold is POSTed to an HTTP
// sink as an OPA decision-log event, in gzip batches. It reads the durable
// logs (the store), never a buffer of decisions: the runtime's watch says
// which log grew, and to which length is durable; the export reads the new
// records from the store and sends them. A sink that is down or slow only
// delays the export, never a decision. What the sink acknowledged (2xx) is
// kept per agent in the cursor file, written atomically, and the export
// resumes from it after a restart: each event is delivered at least once,
// and its decision_id (agent:seq) lets the sink drop repeats.

// DecisionLogConfig configures the export; an empty URL is no export.
type DecisionLogConfig struct {
	// URL is the sink: each batch is one POST of a gzip JSON array of events.
	URL string
	// Store is the store the runtime writes (read only here).
	Store store.Store
	// Dir is where the cursor file is kept (ExportCursorName in it).
	Dir string
	// Labels are added to each event's labels (OPA's id and version are
	// set: id is the host name, version lineage's).
	Labels map[string]string
	// MaxBatch bounds the events of one POST (default 500).
	MaxBatch int
	// MaxBackoff bounds the wait between two attempts (default 5 s); the
	// first wait is 100 ms, doubled each failure, with jitter.
	MaxBackoff time.Duration
	// Flush is how long news is gathered before a batch is read (default
	// 250 ms): the file store reads a log from its start to reach its new
	// records, so fewer, fuller batches cost less.
	Flush time.Duration
	// Timeout bounds one POST (default 30 s).
	Timeout time.Duration
	// Client sends the batches (default: a client with Timeout).
	Client *http.Client
}

// ExportCursorName is the cursor file of the export in the data directory:
// {"sink": URL, "next": {agent: the first seq not yet acknowledged}}.
const ExportCursorName = ".decision-log.json"

// OPAPath is the event's path: the query the guard asks OPA, as OPA writes
// a decision's path.
var OPAPath = strings.ReplaceAll(strings.TrimPrefix(rego.Query, "data."), ".", "/")

// exportCursor is the cursor file's content.
type exportCursor struct {
	Sink string            `json:"sink"`
	Next map[string]uint64 `json:"next"`
}

type exporter struct {
	cfg    DecisionLogConfig
	labels map[string]string
	path   string // the cursor file
	log    interface {
		Warn(string, ...any)
		Info(string, ...any)
	}

	mu      sync.Mutex
	durable map[string]uint64 // agent → records known durable
	next    map[string]uint64 // agent → first seq the sink has not acknowledged
	dirty   map[string]bool   // agents with durable records past next
	wake    chan struct{}     // cap 1

	stop chan struct{}
	done chan struct{}

	sent, failed prometheus.Counter
	lag          prometheus.GaugeFunc
}

// startExport reads the cursor and the logs' lengths, then exports in the
// background until stopExport (New, with DecisionLog.URL).
func (s *Server) startExport() error {
	cfg := s.cfg.DecisionLog
	if cfg.Store == nil {
		return errors.New("decision log: no store")
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 500
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Flush <= 0 {
		cfg.Flush = 250 * time.Millisecond
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.Timeout}
	}
	host, _ := os.Hostname()
	labels := map[string]string{"id": host, "version": lineageVersion()}
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	e := &exporter{cfg: cfg, labels: labels, path: filepath.Join(cfg.Dir, ExportCursorName), log: s.log,
		durable: map[string]uint64{}, next: map[string]uint64{}, dirty: map[string]bool{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	b, err := os.ReadFile(e.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("decision log: %w", err)
	default:
		var c exportCursor
		if err := json.Unmarshal(b, &c); err != nil {
			return fmt.Errorf("decision log: the cursor %s cannot be read (%v): remove it to export every log again", e.path, err)
		}
		if c.Sink == cfg.URL {
			for a, n := range c.Next {
				e.next[a] = n
			}
		} else {
			// D346 (a new sink gets every verdict): the cursor is the old sink's.
			s.log.Info("decision log: the cursor is of another sink: exporting every log from its start", "cursor_sink", c.Sink)
		}
	}
	// Before any request: what the store holds now is durable.
	agents, err := cfg.Store.Agents()
	if err != nil {
		return fmt.Errorf("decision log: %w", err)
	}
	for _, a := range agents {
		var n uint64
		err := cfg.Store.Scan(a, func(seq uint64, _ []byte) error { n = seq + 1; return nil })
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("decision log: a log cannot be read; its records are exported once it can", "agent", a, "error", err.Error())
		}
		e.durable[a] = n
		if n > e.next[a] {
			e.dirty[a] = true
		}
	}
	e.sent = prometheus.NewCounter(prometheus.CounterOpts{Name: "lineage_decision_log_events_total", Help: "Decision-log events the sink acknowledged (serve --decision-log)."})
	e.failed = prometheus.NewCounter(prometheus.CounterOpts{Name: "lineage_decision_log_failures_total", Help: "Decision-log POSTs that failed (they are retried)."})
	e.lag = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lineage_decision_log_lag_records", Help: "Durable records the decision-log sink has not acknowledged."},
		func() float64 { return float64(e.lagRecords()) })
	s.met.reg.MustRegister(e.sent, e.failed, e.lag)
	s.export = e
	s.watchLogs()
	e.signal()
	go e.run()
	return nil
}

// stopExport ends the export; what was not acknowledged is sent after the
// next start.
func (s *Server) stopExport() {
	if e := s.export; e != nil {
		select {
		case <-e.stop:
		default:
			close(e.stop)
		}
		<-e.done
	}
}

// watchLogs sets the runtime's one watcher to tell the checkpoint signer
// and the export.
func (s *Server) watchLogs() {
	ck, ex := s.ckpts.stop != nil, s.export
	s.rt.WatchLogs(&runtime.LogWatch{
		Appended: func(agent string, seq uint64) {
			if ck {
				s.appended(agent, seq)
			}
			if ex != nil {
				ex.appended(agent, seq)
			}
		},
		Unloaded: func(agent string) {
			if ck {
				s.unloaded(agent)
			}
		},
	})
}

// appended: agent's records up to seq are durable (under the runtime's locks).
func (e *exporter) appended(agent string, seq uint64) {
	e.mu.Lock()
	if seq+1 > e.durable[agent] {
		e.durable[agent] = seq + 1
		e.dirty[agent] = true
	}
	e.mu.Unlock()
	e.signal()
}

func (e *exporter) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *exporter) lagRecords() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var n uint64
	for a, d := range e.durable {
		if d > e.next[a] {
			n += d - e.next[a]
		}
	}
	return n
}

// decisionEvent is an OPA decision-log event (github.com/open-policy-agent/opa
// v1/plugins/logs EventV1) with lineage's own field.
type decisionEvent struct {
	Labels     map[string]string `json:"labels"`
	DecisionID string            `json:"decision_id"`
	Path       string            `json:"path"`
	Input      json.RawMessage   `json:"input"`
	Result     json.RawMessage   `json:"result"`
	Timestamp  json.RawMessage   `json:"timestamp"`
	Lineage    eventLineage      `json:"lineage"`
}

type eventLineage struct {
	Agent string       `json:"agent"`
	Seq   uint64       `json:"seq"`
	Hash  string       `json:"hash"`
	Kind  lineage.Kind `json:"kind"`
}

// span is what a batch takes of one agent's log: records [from, to).
type span struct {
	agent    string
	from, to uint64
}

func (e *exporter) run() {
	defer close(e.done)
	backoff := time.Duration(0)
	for {
		select {
		case <-e.stop:
			return
		case <-e.wake:
		}
		select {
		case <-e.stop:
			return
		case <-time.After(e.cfg.Flush):
		}
		for {
			batch, spans, err := e.collect()
			if err != nil {
				e.log.Warn("decision log: reading the logs", "error", err.Error())
			}
			if len(spans) == 0 {
				break
			}
			if len(batch) > 0 {
				for {
					err := e.post(batch)
					if err == nil {
						backoff = 0
						break
					}
					e.failed.Inc()
					if backoff == 0 {
						backoff = 100 * time.Millisecond
					} else if backoff *= 2; backoff > e.cfg.MaxBackoff {
						backoff = e.cfg.MaxBackoff
					}
					e.log.Warn("decision log: the sink did not take a batch; retrying", "events", len(batch), "error", err.Error(), "retry_in", backoff.String())
					wait := backoff/2 + rand.N(backoff/2+1)
					select {
					case <-e.stop:
						return
					case <-time.After(wait):
					}
				}
				e.sent.Add(float64(len(batch)))
			}
			if err := e.advance(spans); err != nil {
				e.log.Warn("decision log: writing the cursor", "error", err.Error())
			}
			select {
			case <-e.stop:
				return
			default:
			}
		}
	}
}

// collect reads up to MaxBatch events from the durable records the sink
// has not acknowledged.
func (e *exporter) collect() ([]decisionEvent, []span, error) {
	e.mu.Lock()
	var todo []span
	for a := range e.dirty {
		if e.durable[a] > e.next[a] {
			todo = append(todo, span{a, e.next[a], e.durable[a]})
		} else {
			delete(e.dirty, a)
		}
	}
	e.mu.Unlock()
	sort.Slice(todo, func(i, j int) bool { return todo[i].agent < todo[j].agent })
	var (
		batch []decisionEvent
		spans []span
		errs  []error
	)
	for _, sp := range todo {
		if len(batch) >= e.cfg.MaxBatch {
			break
		}
		got := sp.from
		err := store.ScanFrom(e.cfg.Store, sp.agent, sp.from, func(seq uint64, line []byte) error {
			if seq < sp.from {
				return nil
			}
			if seq >= sp.to || len(batch) >= e.cfg.MaxBatch {
				return errStopExport
			}
			if seq != got {
				return fmt.Errorf("%s: the store passed record %d, expected %d", sp.agent, seq, got)
			}
			ev, ok, err := e.eventOf(sp.agent, seq, line)
			if err != nil {
				return err
			}
			if ok {
				batch = append(batch, ev)
			}
			got = seq + 1
			return nil
		})
		if err != nil && !errors.Is(err, errStopExport) {
			errs = append(errs, err)
		}
		if got > sp.from {
			spans = append(spans, span{sp.agent, sp.from, got})
		}
	}
	return batch, spans, errors.Join(errs...)
}

var errStopExport = errors.New("stop")

// eventOf makes the event of an action or approval record; other records
// carry no verdict (ok false).
func (e *exporter) eventOf(agent string, seq uint64, line []byte) (decisionEvent, bool, error) {
	var rec struct {
		At   json.RawMessage `json:"at"`
		Kind lineage.Kind    `json:"kind"`
		Body json.RawMessage `json:"body"`
		Hash string          `json:"hash"`
	}
	if err := json.Unmarshal(line, &rec); err != nil {
		return decisionEvent{}, false, fmt.Errorf("%s: record %d: %w", agent, seq, err)
	}
	var input, result json.RawMessage
	switch rec.Kind {
	case lineage.KindAction:
		var b struct {
			Request json.RawMessage `json:"request"`
			Verdict json.RawMessage `json:"verdict"`
		}
		if err := json.Unmarshal(rec.Body, &b); err != nil {
			return decisionEvent{}, false, fmt.Errorf("%s: record %d: %w", agent, seq, err)
		}
		input, _ = json.Marshal(map[string]any{"agent": agent, "request": b.Request})
		result = b.Verdict
	case lineage.KindApproval:
		var b struct {
			RequestID string          `json:"request_id"`
			Approver  string          `json:"approver"`
			Approved  bool            `json:"approved"`
			Verdict   json.RawMessage `json:"verdict"`
		}
		if err := json.Unmarshal(rec.Body, &b); err != nil {
			return decisionEvent{}, false, fmt.Errorf("%s: record %d: %w", agent, seq, err)
		}
		input, _ = json.Marshal(map[string]any{"agent": agent, "approval": map[string]any{
			"request_id": b.RequestID, "approver": b.Approver, "approved": b.Approved}})
		result = b.Verdict
	default:
		return decisionEvent{}, false, nil
	}
	return decisionEvent{Labels: e.labels, DecisionID: agent + ":" + strconv.FormatUint(seq, 10), Path: OPAPath,
		Input: input, Result: result, Timestamp: rec.At,
		Lineage: eventLineage{Agent: agent, Seq: seq, Hash: rec.Hash, Kind: rec.Kind}}, true, nil
}

// post sends one batch: 2xx is acknowledged, anything else is retried.
func (e *exporter) post(batch []decisionEvent) error {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(batch); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Timeout)
	defer cancel()
	go func() {
		select {
		case <-e.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(ctx, "POST", e.cfg.URL, &buf)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := e.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("the sink answered %s", resp.Status)
	}
	return nil
}

// advance moves the cursor past the spans the sink acknowledged and writes
// it: to a temporary file, synced, renamed over the cursor, the directory
// synced (a crash leaves the old cursor or the new one whole).
func (e *exporter) advance(spans []span) error {
	e.mu.Lock()
	for _, sp := range spans {
		if sp.to > e.next[sp.agent] {
			e.next[sp.agent] = sp.to
		}
		if e.durable[sp.agent] <= e.next[sp.agent] {
			delete(e.dirty, sp.agent)
		}
	}
	c := exportCursor{Sink: e.cfg.URL, Next: make(map[string]uint64, len(e.next))}
	for a, n := range e.next {
		c.Next[a] = n
	}
	more := len(e.dirty) > 0
	e.mu.Unlock()
	if more {
		e.signal()
	}
	b, _ := json.Marshal(c)
	tmp := e.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, e.path)
	}
	if err == nil {
		var d *os.File
		if d, err = os.Open(filepath.Dir(e.path)); err == nil {
			err = d.Sync()
			d.Close()
		}
	}
	return err
}

// lineageVersion is the module's version in the build, "(devel)" in a
// build from a work tree.
func lineageVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
