package server

import (
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

	"github.com/lineage-guard/lineage/api"
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

func (s *Server) whoami(w http.ResponseWriter, _ *http.Request, p api.Principal) error {
	return writeJSON(w, http.StatusOK, p)
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
