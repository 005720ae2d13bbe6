// Package servertest starts a real guard service (package server) on a
// loopback port for tests.
//
// It is imported by tests only, never by the packages they test.
package servertest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/file"
	"github.com/lineage-guard/lineage/server"
)

// Service is a started guard service: a server over a runtime over a store,
// serving on a free loopback port until the test ends.
type Service struct {
	URL           string // http://127.0.0.1:port
	AdminToken    string // the token of "root", an admin
	ApproverToken string // the token of "alice", an approver
	Server        *server.Server
	HTTP          *http.Server
	Runtime       *runtime.Runtime
	Store         store.Store
	File          *file.Store // the file store Start opened; nil with WithStore
	Dir           string      // the file store's data directory; "" with WithStore
	// DamageExpected: the test cut or rewrote a log under the store, whose
	// Close then reports the damage (store.ErrDamaged) rather than forget it.
	DamageExpected bool
}

// Option changes how Start sets the service up.
type Option func(*options)

type options struct {
	store   store.Store
	config  []func(*server.Config)
	runtime []func(*runtime.Options)
	handler func(http.Handler) http.Handler
}

// WithConfig changes the server's Config before server.New.
func WithConfig(edit func(*server.Config)) Option {
	return func(o *options) { o.config = append(o.config, edit) }
}

// WithStore runs the service over st instead of a file store in a temporary
// directory. Start still closes it when the test ends.
func WithStore(st store.Store) Option { return func(o *options) { o.store = st } }

// WithRuntime changes the runtime's Options before runtime.Open (a nil
// Compile is the compiler's).
func WithRuntime(edit func(*runtime.Options)) Option {
	return func(o *options) { o.runtime = append(o.runtime, edit) }
}

// WithHandler serves wrap(server) instead of the server itself.
func WithHandler(wrap func(http.Handler) http.Handler) Option {
	return func(o *options) { o.handler = wrap }
}

// Start opens a file store in a temporary directory (unless WithStore), a
// runtime over it (with the compiler, runtime.Options' default), and a server with
// an admin "root" and an approver "alice", each with a new token, and a new
// key; it serves on a free loopback port. When the test ends the HTTP server
// is shut down and the store closed.
func Start(t testing.TB, opts ...Option) *Service {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	s := &Service{AdminToken: server.NewToken(), ApproverToken: server.NewToken(), Store: o.store}
	if s.Store == nil {
		s.Dir = t.TempDir()
		st, err := file.Open(s.Dir, file.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s.Store, s.File = st, st
	}
	ropts := runtime.Options{}
	for _, edit := range o.runtime {
		edit(&ropts)
	}
	s.Runtime = runtime.Open(s.Store, ropts)
	cfg := server.Config{
		Runtime: s.Runtime,
		Principals: []server.Entry{
			{Name: "root", Role: server.RoleAdmin, TokenSHA256: server.TokenSHA256(s.AdminToken)},
			{Name: "alice", Role: server.RoleApprover, TokenSHA256: server.TokenSHA256(s.ApproverToken)},
		},
		Key: server.NewKey(),
	}
	if s.File != nil {
		cfg.SyncStats = s.File.CommitStats
	}
	for _, edit := range o.config {
		edit(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		s.Store.Close()
		t.Fatal(err)
	}
	s.Server = srv
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Store.Close()
		t.Fatal(err)
	}
	s.URL = "http://" + ln.Addr().String()
	s.HTTP = srv.HTTPServer(ln.Addr().String())
	if o.handler != nil {
		s.HTTP.Handler = o.handler(srv)
	}
	go s.HTTP.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.HTTP.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("shutdown: %v", err)
		}
		if err := s.Store.Close(); err != nil && !errors.Is(err, store.ErrClosed) && !(s.DamageExpected && errors.Is(err, store.ErrDamaged)) {
			t.Errorf("closing the store: %v", err)
		}
	})
	return s
}
