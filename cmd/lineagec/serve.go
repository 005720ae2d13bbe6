package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lineage-guard/lineage/internal/storeclock"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/file"
	"github.com/lineage-guard/lineage/runtime/store/memory"
	"github.com/lineage-guard/lineage/runtime/store/postgres"
	"github.com/lineage-guard/lineage/server"
)

type serveParams struct {
	*globalParams
	addr      string
	auth      string
	serverKey string
	tlsCert   string
	tlsKey    string
	logFormat string
	store     string
	maxAgents int
	idle      time.Duration
	ckptKey   string // --checkpoint-key (serve_checkpoint.go)
	agentRPS  float64
	burst     int
	maxClock  time.Duration // --max-clock-error
	config    string        // --config (serve_config.go)
	logLevel  string

	decisionLog string // --decision-log URL (server/export.go)
	cpuProfile  string // --cpuprofile (hidden; bench serve's --guard-cpuprofile)
	memoryStore bool   // --memory-store (hidden; bench serve's --memory-guard)
}

func newServeCmd(g *globalParams) *cobra.Command {
	p := serveParams{globalParams: g}
	cmd := &cobra.Command{
		Use:   "serve [--addr 127.0.0.1:8181] [--auth FILE] [--tls-cert FILE --tls-key FILE]",
		Short: "Serve the guard over HTTP (agents, approvers, operators)",
		Long: `Serve owns the data directory (--data) and serves the HTTP API of the guard
service (docs/service.md; GET /v1/openapi.json describes it): agents decide their
requests, approvers list and approve pending ones, operators read logs.

Admins and approvers come from --auth FILE (JSON or YAML, schema/auth.schema.json;
` + "`lineagec token`" + ` makes a token and its line). Without --auth one admin token is
kept in <data>/admin.token (mode 0600); its path, never the token, is printed on
stderr. Agent tokens are returned once, when an agent is created: they are an HMAC
of the agent id under the server key, <data>/server.key (or --server-key FILE).

With --store postgres://… (or $LINEAGE_STORE) the logs live in PostgreSQL, which
several serve nodes may share (docs/stores.md): give each the same --store, the same
server key and the same --auth. Agents unused for --agent-idle, and the least
recently used beyond --max-agents, leave memory; their logs bring them back.

Each agent's token may make --agent-rps calls a second (bursts of --agent-burst)
at this node; over it the call is refused 429 too_many_requests with
Retry-After and nothing is recorded. On a shared store each node counts its own.

On SIGTERM or SIGINT it stops accepting, finishes the requests in flight, closes
the store and exits 0. On SIGHUP it re-reads the --auth file and the server key
file (one key a line: the first signs new agent tokens, every one verifies); a
file that does not validate is refused with a log line and the old ones stay.
Request logs go to stderr (--log-format text|json, --log-level); /health and
/metrics are logged at debug only. --config FILE (JSON or YAML,
schema/serve.schema.json) holds any of these flags by name; the command line
wins (docs/operations.md).
` + exitCodesHelp,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := applyServeConfig(cmd, p.config); err != nil {
				return err
			}
			return runServe(cmd.Context(), p, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.addr, "addr", "127.0.0.1:8181", "address to listen on")
	f.StringVar(&p.auth, "auth", "", "admins and approvers: a JSON or YAML file (schema/auth.schema.json)")
	f.StringVar(&p.serverKey, "server-key", "", "the key of agent tokens (default <data>/server.key, made if missing)")
	f.StringVar(&p.tlsCert, "tls-cert", "", "TLS certificate file (with --tls-key)")
	f.StringVar(&p.tlsKey, "tls-key", "", "TLS key file (with --tls-cert)")
	f.StringVar(&p.logFormat, "log-format", "text", "request log format on stderr: text, json")
	f.StringVar(&p.store, "store", "", "a shared store, postgres://… (default $LINEAGE_STORE; without one: the file store in --data)")
	f.IntVar(&p.maxAgents, "max-agents", 10000, "agents kept in memory; the least recently used beyond it are unloaded (0: no bound)")
	f.DurationVar(&p.idle, "agent-idle", 10*time.Minute, "unload agents unused for this long (0: never)")
	f.Float64Var(&p.agentRPS, "agent-rps", server.DefaultAgentRPS, "calls a second each agent's token may make at this node; over it 429 too_many_requests (0: no quota)")
	f.IntVar(&p.burst, "agent-burst", server.DefaultAgentBurst, "calls an agent's token may make at once above --agent-rps")
	f.StringVar(&p.decisionLog, "decision-log", "", "POST every verdict to this HTTP sink as OPA decision-log events, in gzip batches, from the durable logs (docs/operations.md)")
	f.DurationVar(&p.maxClock, "max-clock-error", storeclock.DefaultMaxError, "on a shared store (--store), the largest error of this node's clock against the store's; beyond it writes answer 503 clock_unsynced")
	f.StringVar(&p.ckptKey, "checkpoint-key", "", "sign checkpoints with this private key (lineagec key generate): GET /v1/agents/{agent}/checkpoint and /proof/{seq}")
	f.StringVar(&p.config, "config", "", "read these flags from a JSON or YAML file (schema/serve.schema.json); the command line wins")
	f.StringVar(&p.logLevel, "log-level", "info", "least level logged: debug, info, warn, error (/health and /metrics are debug)")
	f.StringVar(&p.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to FILE (go tool pprof)")
	_ = f.MarkHidden("cpuprofile") // a tool of bench serve, not of an operator
	f.BoolVar(&p.memoryStore, "memory-store", false, "keep the logs in memory only: nothing is durable, everything is lost on exit (bench serve's measure of what durability costs)")
	_ = f.MarkHidden("memory-store") // never an operator's: a 200 would not be durable
	return cmd
}

func runServe(ctx context.Context, p serveParams, stderr io.Writer) error {
	if (p.tlsCert == "") != (p.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if p.maxAgents < 0 || p.idle < 0 {
		return errors.New("--max-agents and --agent-idle must not be negative")
	}
	if p.agentRPS < 0 || math.IsNaN(p.agentRPS) || math.IsInf(p.agentRPS, 0) || p.burst < 1 {
		return errors.New("--agent-rps must be 0 (no quota) or more, --agent-burst 1 or more")
	}
	rps := p.agentRPS
	if rps == 0 {
		rps = -1 // server.Config: negative is no quota
	}
	if p.store == "" {
		p.store = os.Getenv("LINEAGE_STORE")
	}
	server.SetGCPercent() // CPU a decision (D221: 'lineagec serve' runs its GC at 400)
	if p.cpuProfile != "" {
		stop, err := benchSetup(-1, p.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	level, err := logLevel(p.logLevel)
	if err != nil {
		return err
	}
	var handler slog.Handler
	switch opts := (&slog.HandlerOptions{Level: level}); p.logFormat {
	case "text":
		handler = slog.NewTextHandler(stderr, opts)
	case "json":
		handler = slog.NewJSONHandler(stderr, opts)
	default:
		return fmt.Errorf("unknown --log-format %q (want text, json)", p.logFormat)
	}
	signer, err := checkpointSigner(p.ckptKey)
	if err != nil {
		return err
	}
	// The auth file is read before anything is created: a typo there makes nothing.
	var principals []server.Entry
	if p.auth != "" {
		entries, err := server.LoadAuth(p.auth)
		if err != nil {
			return fmt.Errorf("--auth %s:\n%w", p.auth, err)
		}
		principals = entries
	}
	dir := p.dataDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating the data directory: %w", err)
	}
	keyFile := p.serverKey
	if keyFile == "" {
		keyFile = filepath.Join(dir, "server.key")
	}
	key, _, err := server.LoadOrCreateSecret(keyFile, server.NewKey)
	if err != nil {
		return fmt.Errorf("server key: %w", err)
	}
	if _, err := server.KeysFrom(key); err != nil {
		return fmt.Errorf("server key %s: %w", keyFile, err)
	}
	if p.auth == "" {
		tokenFile := filepath.Join(dir, "admin.token")
		tok, _, err := server.LoadOrCreateSecret(tokenFile, func() []byte { return []byte(server.NewToken() + "\n") })
		if err != nil {
			return fmt.Errorf("admin token: %w", err)
		}
		principals = []server.Entry{{Name: "admin", Role: server.RoleAdmin,
			TokenSHA256: server.TokenSHA256(strings.TrimSpace(string(tok)))}}
		abs, _ := filepath.Abs(tokenFile)
		fmt.Fprintf(stderr, "lineagec: no --auth: the admin token is in %s\n", abs)
	} else if tokenFile := filepath.Join(dir, "admin.token"); fileExists(tokenFile) {
		// D307 (under --auth, admin.token is not a key): a token that worked
		// yesterday gets 401 today; say why before anyone tries it.
		abs, _ := filepath.Abs(tokenFile)
		fmt.Fprintf(stderr, "lineagec: --auth %s: only its principals may call; the admin token in %s is not used (make an admin: lineagec token --role admin)\n", p.auth, abs)
	}
	// The file store in dir, or the shared store at --store; the keys stay
	// in dir either way (every node needs the same server key).
	var (
		st        store.Store
		news      store.News // the other nodes' appends, on a shared store
		clock     *storeclock.Clock
		syncStats func() store.CommitStats
		where     = dir
	)
	switch {
	case p.memoryStore && p.store != "":
		return fmt.Errorf("--memory-store and --store %s: choose one", p.store)
	case p.memoryStore:
		st, where = memory.New(), "memory (nothing durable)"
	case p.store != "":
		pg, err := postgres.Open(ctx, p.store, postgres.Options{})
		if err != nil {
			return err
		}
		st, news, where = pg, pg, "the PostgreSQL store"
		// One clock: the store's (D354 (the store's clock is every node's)).
		read, done := pg.ClockSource()
		defer done()
		clock = storeclock.Start(read, storeclock.Options{MaxError: p.maxClock, Logger: slog.New(handler)})
		defer clock.Close()
	default:
		fs, err := file.Open(dir, file.Options{})
		if err != nil {
			return err
		}
		st, syncStats = fs, fs.CommitStats
	}
	closed := false
	closeStore := func() error {
		if closed {
			return nil
		}
		closed = true
		return st.Close()
	}
	defer closeStore()
	// Traces only with OTEL_EXPORTER_OTLP_ENDPOINT (docs/operations.md,
	// Traces); the spans still buffered are flushed last, on any exit.
	tp, shutdownTraces, err := server.TracingFromEnv(ctx)
	if err != nil {
		return fmt.Errorf("traces: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownTraces(sctx); err != nil {
			fmt.Fprintf(stderr, "lineagec: warning: flushing the traces: %v\n", err)
		}
	}()
	rt := runtime.Open(st, runtime.Options{
		MaxAgents:      p.maxAgents,
		IdleTimeout:    p.idle,
		Clock:          clockNow(clock),
		TracerProvider: tp,
	})
	// The size and head of the last checkpoint signed of each agent, kept by
	// the store (the data directory, or the shared database).
	marks, _ := st.(store.Marks)
	logger := slog.New(handler)
	srv, err := server.New(server.Config{Runtime: rt, Principals: principals, Key: key,
		Logger: logger, SyncStats: syncStats, CheckpointSigner: signer, AgentRPS: rps, AgentBurst: p.burst,
		Marks: marks, Backup: serveBackup(st, dir), DecisionLog: server.DecisionLogConfig{URL: p.decisionLog, Store: st, Dir: dir},
		News: news, Clock: clockOf(clock), TracerProvider: tp})
	if err != nil {
		return err
	}
	defer srv.Close()
	var fixed []server.Entry // without --auth: the admin of admin.token, kept across reloads
	if p.auth == "" {
		fixed = principals
	}
	certs, err := loadTLSCerts(p.tlsCert, p.tlsKey)
	if err != nil {
		return err
	}
	defer reloadOnHUP(srv, logger, p.auth, keyFile, fixed, certs)()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	hs := srv.HTTPServer(p.addr)
	hs.TLSConfig = certs.config()
	scheme := "http"
	if p.tlsCert != "" {
		scheme = "https"
	}
	fmt.Fprintf(stderr, "lineagec: serving %s on %s://%s\n", where, scheme, ln.Addr())
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && scheme == "http" && !tcp.IP.IsLoopback() {
		// D308 (plain HTTP beyond loopback is said at start).
		fmt.Fprintf(stderr, "lineagec: warning: %s is not a loopback address and this is plain HTTP: "+
			"tokens and approvals cross the network in clear text; give --tls-cert and --tls-key\n", ln.Addr())
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	served := make(chan error, 1)
	go func() {
		if p.tlsCert != "" {
			served <- hs.ServeTLS(ln, "", "") // the certificate of certs (serve_config.go)
		} else {
			served <- hs.Serve(ln)
		}
	}()
	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	fmt.Fprintln(stderr, "lineagec: shutting down: finishing the requests in flight")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving: %w", err)
	}
	srv.Close() // the export stops before the store closes
	if err := closeStore(); err != nil {
		return fmt.Errorf("closing the store: %w", err)
	}
	fmt.Fprintln(stderr, "lineagec: stopped; the store is closed")
	return nil
}

// fileExists reports whether path names an existing file.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// clockNow is the runtime's clock: the store's on a shared store, else nil
// (the local clock).
func clockNow(c *storeclock.Clock) func() time.Time {
	if c == nil {
		return nil
	}
	return c.Now
}

// clockOf is the server's view of the clock: none on the file store.
func clockOf(c *storeclock.Clock) interface{ Unsynced() error } {
	if c == nil {
		return nil
	}
	return c
}
