package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/mod/sumdb/note"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/api"
	"github.com/lineage-guard/lineage/compiler"
	"github.com/lineage-guard/lineage/internal/diag"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
)

// Config is what a Server stands on.
type Config struct {
	// Runtime decides and records; the server never writes a record itself.
	Runtime *runtime.Runtime
	// Principals are the admins and approvers (an auth file, or the one
	// default admin).
	Principals []Entry
	// Key is the server key ring (the contents of its file: hex keys, one a
	// line, KeysFrom): agent tokens are MACed under the first and verified
	// under any. Every node sharing a store needs the same ring.
	Key []byte
	// Logger gets one line per HTTP request; nil discards them.
	Logger *slog.Logger
	// SyncStats, if set, feeds lineage_store_sync_duration_seconds.
	SyncStats func() store.CommitStats
	// CheckpointSigner, if set, signs the checkpoints of GET …/checkpoint
	// (serve --checkpoint-key); nil answers no_checkpoint_key (checkpoint.go).
	CheckpointSigner note.Signer
	// CheckpointInterval is the least time between two checkpoints of one
	// growing log (checkpoint.go); zero means DefaultCheckpointInterval.
	CheckpointInterval time.Duration
	// AgentRPS and AgentBurst are each agent token's request quota at this
	// server (quota.go): zero means DefaultAgentRPS and DefaultAgentBurst,
	// a negative AgentRPS no quota.
	AgentRPS   float64
	AgentBurst int
	// Marks, if set, keeps across restarts the size and head of the last
	// checkpoint the server signed of each agent (the store's, see
	// store.Marks): a log that does not extend it is refused
	// (checkpoint_diverged) by the checkpoint, proof and verify routes.
	Marks store.Marks
	// Backup, if set, writes GET /v1/backup (backup.go); nil answers
	// not_found (a PostgreSQL store: pg_dump).
	Backup BackupFunc
	// DecisionLog, if its URL is set, exports every verdict to a sink
	// (export.go).
	DecisionLog DecisionLogConfig
	// News, if set, tells of the appends of the other nodes on a shared
	// store; the event stream and held requests follow them (news.go).
	News store.News
	// Clock, if set, is the node's time base on a shared store: while
	// Unsynced says why not, writes (POST) answer 503 clock_unsynced and
	// /health says why (internal/storeclock, docs/stores.md).
	Clock interface{ Unsynced() error }
	// TracerProvider, if set, gets a span for each HTTP request, the child
	// of the caller's traceparent (traces.go, TracingFromEnv); nil: none.
	TracerProvider trace.TracerProvider
}

// MaxWait is the longest ?wait= on a request.
const MaxWait = 60 * time.Second

// writeTimeout bounds writing a response (not a stream): a held request
// (MaxWait) and then some.
const writeTimeout = MaxWait + 30*time.Second

// Server is the HTTP API of docs/service.md over a runtime.
type Server struct {
	cfg   Config
	rt    *runtime.Runtime
	auth  atomic.Pointer[authority] // swapped whole by Reload
	log   *slog.Logger
	hub   *hub
	met   *metrics
	quota *quotas
	mux   *http.ServeMux
	names sync.Map // agent id → genesis name (never changes)
	ckpts signedLogs

	// vetted: agents whose log was found to extend its checkpoint mark
	// (checkMark), once a process.
	vetted sync.Map

	export   *exporter     // serve --decision-log (export.go)
	stopNews func()        // ends the news listener (news.go)
	newsDone chan struct{} // closed when it has ended

	tracer trace.Tracer // nil: no spans (traces.go)
}

// New builds a server. Close it to end its event streams and waits.
func New(cfg Config) (*Server, error) {
	if cfg.Runtime == nil {
		return nil, errors.New("server: no runtime")
	}
	auth, err := newAuthority(cfg.Principals, cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, rt: cfg.Runtime, log: log, hub: newHub(), mux: http.NewServeMux(),
		quota: newQuotas(cfg.AgentRPS, cfg.AgentBurst)}
	s.auth.Store(auth)
	if cfg.TracerProvider != nil {
		s.tracer = cfg.TracerProvider.Tracer("github.com/lineage-guard/lineage/server")
	}
	s.met = newMetrics(s)
	for _, rt := range s.routes() {
		s.mux.Handle(rt.pattern(), s.wrap(rt))
	}
	s.mountInbox()
	if cfg.CheckpointSigner != nil {
		s.startCheckpoints()
	}
	if cfg.DecisionLog.URL != "" {
		if err := s.startExport(); err != nil {
			s.stopCheckpoints()
			return nil, err
		}
	}
	if cfg.News != nil {
		s.startNews()
	}
	return s, nil
}

// Reload replaces the principals and the server key ring at once (serve on
// SIGHUP): the next request is checked against the new ones; a request
// already past its check finishes as it began. On error nothing changes.
func (s *Server) Reload(principals []Entry, key []byte) error {
	a, err := newAuthority(principals, key)
	if err != nil {
		return err
	}
	s.auth.Store(a)
	return nil
}

// quietRoutes are polled by monitors: their request lines are logged at
// debug only, D336 (health and metrics polls at debug).
var quietRoutes = map[string]bool{"/health": true, "/metrics": true}

// Close ends the event streams and the held requests (they answer at once
// with the verdict as it is) and the checkpoint signers; in-flight
// decisions are not affected.
func (s *Server) Close() {
	if s.stopNews != nil {
		s.stopNews()
		<-s.newsDone
	}
	s.hub.close()
	s.stopCheckpoints()
	s.stopExport()
}

// clockErr is the 503 clock_unsynced of a write while the node's clock is
// out of its bound (Config.Clock; D355 (a node beyond the bound refuses
// writes)), else nil. Every write asks it: the API's POSTs and the inbox's.
func (s *Server) clockErr() error {
	if s.cfg.Clock == nil {
		return nil
	}
	if err := s.cfg.Clock.Unsynced(); err != nil {
		return newError(api.CodeClockUnsynced, err.Error()+"; nothing was recorded")
	}
	return nil
}

// access says who may call a route.
type access int

const (
	public      access = iota // no token needed
	anyone                    // any valid token
	adminOnly                 // admin
	staff                     // admin, approver
	staffOrSelf               // admin, approver, the agent named in the path
	adminOrSelf               // admin, the agent named in the path
)

type route struct {
	method, path string
	who          access
	h            func(w http.ResponseWriter, r *http.Request, p api.Principal) error
}

func (rt route) pattern() string { return rt.method + " " + rt.path }

// routes is the API: the mux and the OpenAPI test both read it.
func (s *Server) routes() []route {
	return []route{
		{"POST", "/v1/agents", adminOnly, s.createAgent},
		{"GET", "/v1/agents", staff, s.listAgents},
		{"GET", "/v1/whoami", anyone, s.whoami},
		{"GET", "/v1/agents/{agent}", staffOrSelf, s.state},
		{"GET", "/v1/agents/{agent}/policy", staffOrSelf, s.policy},
		{"POST", "/v1/agents/{agent}/requests", adminOrSelf, s.request},
		{"GET", "/v1/agents/{agent}/requests/{id}", staffOrSelf, s.getRequest},
		{"POST", "/v1/agents/{agent}/requests/{id}/approve", staff, s.approve},
		{"POST", "/v1/agents/{agent}/requests/{id}/reject", staff, s.reject},
		{"POST", "/v1/agents/{agent}/terminate", staff, s.terminate},
		{"GET", "/v1/agents/{agent}/log", staff, s.logLines},
		{"GET", "/v1/agents/{agent}/verify", staff, s.verify},
		{"GET", "/v1/agents/{agent}/checkpoint", staffOrSelf, s.checkpoint},
		{"GET", "/v1/agents/{agent}/proof/{seq}", staffOrSelf, s.proof},
		{"GET", "/v1/pending", staff, s.pending},
		{"GET", "/v1/backup", adminOnly, s.backup},
		{"GET", "/v1/events", staff, func(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
			s.handleEvents(w, r)
			return nil
		}},
		{"GET", "/health", public, s.health},
		{"GET", "/metrics", public, func(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
			promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
			return nil
		}},
		{"GET", "/v1/openapi.json", public, func(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
			w.Header().Set("Content-Type", "application/json")
			_, err := w.Write(openAPI)
			return err
		}},
	}
}

// ServeHTTP refuses paths that are not clean before routing, and answers
// unknown routes with the API's error body.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if p == "" || p[0] != '/' || path.Clean(p) != p {
		s.log.Info("request", "method", r.Method, "path", p, "status", http.StatusBadRequest)
		writeError(w, newError(api.CodeBadRequest, "the path is not clean (no '..', '.' or '//' segments, encoded or not)"))
		return
	}
	h, pattern := s.mux.Handler(r)
	if pattern == "" {
		rec := &statusRecorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		e := newError(api.CodeNotFound, fmt.Sprintf("no route %s %s", r.Method, p))
		if rec.status == http.StatusMethodNotAllowed {
			e = newError(api.CodeMethod, fmt.Sprintf("%s is not allowed on %s (allowed: %s)", r.Method, p, rec.header.Get("Allow")))
			w.Header().Set("Allow", rec.header.Get("Allow"))
		}
		s.log.Info("request", "method", r.Method, "path", p, "status", e.wire.Status)
		writeError(w, e)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// statusRecorder catches the status the mux gives an unknown route.
type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *statusRecorder) WriteHeader(code int)        { r.status = code }

// statusWriter remembers the status a handler sent.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// agentIDPattern is what a store accepts as an agent id.
var agentIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$`)

// wrap is the middleware of every route: authentication, authorization,
// the request log and the HTTP metrics; then the handler's error as a body.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		r, span := s.startHTTPSpan(r, rt)
		p, err := s.authorize(r, rt.who)
		if err == nil && r.Method == http.MethodPost {
			err = s.clockErr()
		}
		if err == nil {
			if rt.path != "/v1/events" {
				_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeTimeout))
			}
			err = rt.h(sw, r, p)
		}
		if err != nil {
			e := errorOf(err)
			if sw.status == 0 {
				writeError(sw, e)
			}
			if e.wire.Status >= 500 {
				s.log.Error("request failed", "method", r.Method, "route", rt.path, "error", err.Error())
			}
		}
		took := time.Since(start)
		endHTTPSpan(span, sw.status, p)
		s.met.http.WithLabelValues(rt.path, strconv.Itoa(sw.status)).Inc()
		s.met.httpTime.WithLabelValues(rt.path).Observe(took.Seconds())
		attrs := []any{"method", r.Method, "route", rt.path, "path", r.URL.Path, "status", sw.status, "duration", took}
		if p.Name != "" {
			attrs = append(attrs, "principal", p.Name, "role", string(p.Role))
		}
		level := slog.LevelInfo
		if quietRoutes[rt.path] {
			level = slog.LevelDebug
		}
		s.log.Log(r.Context(), level, "request", attrs...)
	})
}

// authorize finds the caller's principal and checks it may call the route.
func (s *Server) authorize(r *http.Request, who access) (api.Principal, error) {
	if who == public {
		return api.Principal{}, nil
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return api.Principal{}, newError(api.CodeUnauthorized, "this call needs Authorization: Bearer <token>")
	}
	p, ok := s.auth.Load().principal(strings.TrimSpace(token))
	if !ok {
		// D307 (under --auth, admin.token is not a key): say where tokens come from.
		return api.Principal{}, newError(api.CodeUnauthorized, "the token is not known to this server "+
			"(admins and approvers are the principals of its --auth file, or, without --auth, the admin token in its data directory's admin.token; "+
			"an agent token is valid only for the server key it was made under)")
	}
	if p.Role == api.RoleAgent {
		// Every call of an agent's token counts, before anything is done.
		if wait, ok := s.quota.take(p.Agent, time.Now()); !ok {
			s.met.throttled.Inc()
			return p, tooManyRequests(wait, s.quota)
		}
	}
	agent := r.PathValue("agent")
	if agent != "" && !agentIDPattern.MatchString(agent) {
		return p, newError(api.CodeUnknownAgent, fmt.Sprintf("%q is not an agent id", agent))
	}
	allowed := false
	switch who {
	case anyone:
		allowed = true
	case adminOnly:
		allowed = p.Role == api.RoleAdmin
	case staff:
		allowed = p.Role == api.RoleAdmin || p.Role == api.RoleApprover
	case staffOrSelf:
		allowed = p.Role == api.RoleAdmin || p.Role == api.RoleApprover || (p.Role == api.RoleAgent && p.Agent == agent)
	case adminOrSelf:
		allowed = p.Role == api.RoleAdmin || (p.Role == api.RoleAgent && p.Agent == agent)
	}
	if !allowed {
		return p, newError(api.CodeForbidden, fmt.Sprintf("%s %q may not call %s %s", p.Role, p.Name, r.Method, r.URL.Path))
	}
	return p, nil
}

func writeError(w http.ResponseWriter, e *httpError) {
	if e.wire.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="lineage"`)
	}
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeJSON(w, e.wire.Status, e.wire)
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, err = w.Write(append(b, '\n'))
	return err
}

func (s *Server) createAgent(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	var b api.CreateBody
	if err := decodeBody(w, r, &b); err != nil {
		return badRequest(err)
	}
	if len(b.Policy) == 0 || bytes.Equal(b.Policy, []byte("null")) {
		return newError(api.CodeBadRequest, "/policy: a policy document is required")
	}
	if b.Policy[0] != '{' {
		return newError(api.CodeBadRequest, "/policy: expected an object")
	}
	if d := regoPaths(b.Policy); len(d) > 0 {
		return invalidPolicy(d)
	}
	c, err := compiler.Compile("", b.Policy)
	if err != nil {
		var list diag.List
		if errors.As(err, &list) {
			return invalidPolicy(list)
		}
		return newError(api.CodeInvalidPolicy, err.Error())
	}
	opts := runtime.CreateOptions{Name: b.Name}
	if b.Parent != "" {
		if !agentIDPattern.MatchString(b.Parent) {
			return newError(api.CodeUnknownAgent, fmt.Sprintf("parent %q is not an agent id", b.Parent))
		}
		opts.Parent = &lineage.Parent{Agent: b.Parent}
	}
	id, err := s.rt.CreateAgent(r.Context(), c, opts)
	if err != nil {
		return err
	}
	s.names.Store(id, b.Name)
	return writeJSON(w, http.StatusCreated, api.Created{Agent: id, Token: s.auth.Load().agentToken(id), Digest: c.Digest})
}

// regoPaths refuses extension modules given by path: over the network a
// policy inlines its Rego as source, so that a caller can never make the
// server read its own files (D74).
func regoPaths(doc []byte) diag.List {
	var p struct {
		Rego []map[string]json.RawMessage `json:"rego"`
	}
	if json.Unmarshal(doc, &p) != nil {
		return nil // the compiler reports what is wrong
	}
	var out diag.List
	for i, m := range p.Rego {
		if _, ok := m["path"]; ok {
			out = append(out, diag.Diagnostic{Code: diag.CodeSchema, Pointer: fmt.Sprintf("/rego/%d/path", i),
				Message: "a policy sent to the service must inline its Rego extensions as {source}; a path would be read from the server's disk"})
		}
	}
	return out
}

func (s *Server) listAgents(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	q, err := listQuery(r, true)
	if err != nil {
		return err
	}
	list, next, err := s.rt.ListAgents(q)
	if err != nil {
		return listError(err)
	}
	rows := make([]api.Agent, 0, len(list))
	for _, a := range list {
		rows = append(rows, api.Agent{Agent: a.Agent, Name: a.Name, Status: a.Status, Digest: a.Digest, Seq: a.Seq, Error: a.Error})
	}
	return writeJSON(w, http.StatusOK, listBody{"agents": rows, "next_cursor": nextCursor(next)})
}

// listBody is the answer of a paged list: the rows and next_cursor (null
// after the last page).
type listBody map[string]any

func nextCursor(next string) any {
	if next == "" {
		return nil
	}
	return next
}

// listQuery reads a list's limit, cursor and (for agents) status.
func listQuery(r *http.Request, status bool) (runtime.ListQuery, error) {
	var q runtime.ListQuery
	known := "limit, cursor"
	if status {
		known += ", status"
	}
	for k, v := range r.URL.Query() {
		if len(v) != 1 {
			return q, newError(api.CodeBadRequest, fmt.Sprintf("query parameter %q given %d times", k, len(v)))
		}
		switch {
		case k == "limit":
			n, err := strconv.Atoi(v[0])
			if err != nil || n < 1 || n > store.MaxListLimit {
				return q, newError(api.CodeBadRequest, fmt.Sprintf("limit %q: expected a whole number from 1 to %d", v[0], store.MaxListLimit))
			}
			q.Limit = n
		case k == "cursor":
			q.Cursor = v[0]
		case k == "status" && status:
			if v[0] != store.StatusAlive && v[0] != store.StatusTerminated && v[0] != store.StatusDamaged {
				return q, newError(api.CodeBadRequest, fmt.Sprintf("status %q: expected alive, terminated or damaged", v[0]))
			}
			q.Status = v[0]
		default:
			return q, newError(api.CodeBadRequest, fmt.Sprintf("unknown query parameter %q (only %s)", k, known))
		}
	}
	return q, nil
}

// listError makes a cursor that no page gave a 400.
func listError(err error) error {
	if errors.Is(err, store.ErrBadCursor) {
		return newError(api.CodeBadRequest, "cursor: not a next_cursor of this list")
	}
	return err
}

func (s *Server) whoami(w http.ResponseWriter, _ *http.Request, p api.Principal) error {
	return writeJSON(w, http.StatusOK, p)
}

func (s *Server) state(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	agent := r.PathValue("agent")
	st, err := s.rt.State(r.Context(), agent)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, st)
}

func (s *Server) policy(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	agent := r.PathValue("agent")
	info, err := s.rt.Info(r.Context(), agent)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.PolicyAnswer{Digest: info.Digest, Policy: info.Policy})
}

// requestBody is a request as an agent sends it (api.RequestBody); At is
// only there to be refused.
type requestBody struct {
	api.RequestBody `json:",inline"`
	At              json.RawMessage `json:"at"`
}

func (s *Server) request(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	agent := r.PathValue("agent")
	var b requestBody
	if err := decodeBody(w, r, &b); err != nil {
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
		s.hub.publish(event{"pending", map[string]any{"agent": agent, "name": s.name(r.Context(), agent),
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
	s.hub.publish(event{"terminated", data})
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
	err := decodeBody(w, r, &b)
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
	s.hub.publish(event{"decided", map[string]any{"agent": agent, "request_id": id, "by": p.Name, "verdict": v}})
	s.hub.wake(agent, id)
	s.announceTermination(agent, v.Terminated, "")
	return v, nil
}

func (s *Server) terminate(w http.ResponseWriter, r *http.Request, p api.Principal) error {
	agent := r.PathValue("agent")
	var b api.TerminateBody
	if r.ContentLength != 0 {
		if err := decodeBody(w, r, &b); err != nil && !strings.HasPrefix(err.Error(), "the body is empty") {
			return badRequest(err)
		}
	}
	st, err := s.rt.Terminate(r.Context(), agent, runtime.Kill{By: p.Name, Note: b.Reason})
	if err != nil {
		return err
	}
	s.announceTermination(agent, lineage.Killed, p.Name)
	return writeJSON(w, http.StatusOK, st)
}

func (s *Server) logLines(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	agent := r.PathValue("agent")
	var from uint64
	q := r.URL.Query()
	for k := range q {
		if k != "from" {
			return newError(api.CodeBadRequest, fmt.Sprintf("unknown query parameter %q (only from)", k))
		}
	}
	if fs := q.Get("from"); fs != "" {
		n, err := strconv.ParseUint(fs, 10, 64)
		if err != nil {
			return newError(api.CodeBadRequest, fmt.Sprintf("from=%q: a record seq, 0 or more", fs))
		}
		from = n
	}
	started := false
	err := s.rt.ScanLog(r.Context(), agent, from, func(_ uint64, line []byte) error {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		_, err := w.Write([]byte{'\n'})
		return err
	})
	if err != nil {
		return err // after the first line the status is sent: the stream just ends
	}
	if !started {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
	}
	return nil
}

func (s *Server) verify(w http.ResponseWriter, r *http.Request, _ api.Principal) error {
	res, err := s.verifyOf(r.PathValue("agent"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

func (s *Server) verifyOf(agent string) (api.VerifyResult, error) {
	recs, err := s.rt.Records(agent)
	var chain *runtime.ChainError
	var damage *store.DamageError
	switch {
	case errors.As(err, &chain):
		return api.VerifyResult{Seq: &chain.Seq, Message: chain.Reason}, nil
	case errors.As(err, &damage):
		return api.VerifyResult{Seq: &damage.Seq, Message: damage.Reason}, nil
	case err != nil:
		return api.VerifyResult{}, err
	case len(recs) < 2:
		seq := uint64(len(recs))
		return api.VerifyResult{Seq: &seq, Message: "log ends before its policy record"}, nil
	}
	n := len(recs)
	if s.cfg.Marks != nil {
		mark, err := s.cfg.Marks.LoadMark(agent)
		if err != nil {
			return api.VerifyResult{}, err
		}
		if why := mark.Shortfall(uint64(n), func(seq uint64) string { return recs[seq].Hash }); why != "" {
			seq := min(uint64(n), mark.Size-1)
			return api.VerifyResult{Seq: &seq, Message: api.CodeCheckpointDiverged + ": " + why}, nil
		}
	}
	return api.VerifyResult{OK: true, Records: &n, Head: recs[n-1].Hash}, nil
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
		rows = append(rows, api.Pending{Agent: p.Agent, Name: p.Name, RequestID: p.RequestID,
			Tool: p.Tool, Args: argsOrEmpty(p.Args), At: lineage.Time{Time: p.At}, Cost: p.Cost})
	}
	return writeJSON(w, http.StatusOK, listBody{"pending": rows, "next_cursor": nextCursor(next)})
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request, _ api.Principal) error {
	// One row of the agent index: the store answers, at a cost that does
	// not grow with the number of agents (a directory listing would).
	if _, _, err := s.rt.ListAgents(runtime.ListQuery{Limit: 1}); err != nil {
		return writeJSON(w, http.StatusServiceUnavailable, &api.Error{Code: api.CodeUnavailable, Message: "the store is not usable: " + err.Error()})
	}
	if s.cfg.Clock != nil {
		if err := s.cfg.Clock.Unsynced(); err != nil {
			return writeJSON(w, http.StatusServiceUnavailable, &api.Error{Code: api.CodeClockUnsynced, Message: err.Error() + "; writes are refused"})
		}
	}
	return writeJSON(w, http.StatusOK, struct{}{})
}

// HTTPServer returns the http.Server that `lineagec serve` runs on addr: the
// server's handler with read and idle timeouts set (a held request and an
// event stream set their own write deadlines), and Close run on Shutdown.
func (s *Server) HTTPServer(addr string) *http.Server {
	hs := &http.Server{
		Addr:              addr,
		Handler:           s,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	hs.RegisterOnShutdown(s.Close)
	return hs
}
