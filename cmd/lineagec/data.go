package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime"
	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/file"
	"github.com/lineage-guard/lineage/runtime/store/postgres"
)

// session is an open store and the runtime over it: the data directory's
// File store (which holds the directory's lock: shared for readers,
// exclusive for a writer), or, with --store, the PostgreSQL store that serve
// nodes share (D180: '--store' for the agent commands).
type session struct {
	where string // the data directory, or "the PostgreSQL store"
	st    store.Store
	rt    *runtime.Runtime
}

// access says what a command does with the data directory.
type access int

const (
	readData   access = iota // the directory must exist; opened read-only (shared lock)
	writeData                // the directory must exist; exclusive lock
	createData               // the directory is created if missing; exclusive lock
)

// openSession opens the store: the PostgreSQL store with --store (or
// $LINEAGE_STORE), else the data directory. Only agent create makes a
// missing directory: every other command reports it, so a typo in --data
// does not quietly start an empty store.
func openSession(g *globalParams, how access) (*session, error) {
	if url := g.storeURL(); url != "" {
		return openSharedSession(url)
	}
	dir := g.dataDir()
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) && how != createData:
		return nil, fmt.Errorf("no lineage data at %s; create an agent first with `lineagec agent create`", dir)
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("creating the data directory: %w", err)
		}
	case err != nil:
		return nil, fmt.Errorf("data directory: %w", err)
	case !info.IsDir():
		return nil, fmt.Errorf("data directory %s is not a directory", dir)
	}
	// A serve that owns the directory holds it for as long as it runs:
	// waiting is in vain, and the way in is through it. D306 (a directory
	// held by serve: say --server, do not wait).
	st, err := file.Open(dir, file.Options{ReadOnly: how == readData})
	if errors.Is(err, file.ErrLocked) {
		if h := file.LockHolderOf(dir); serveURL(h.Command) != "" {
			return nil, fmt.Errorf("the data directory %s is in use by %s, which owns it while it runs: "+
				"talk to it instead, with --server %s (or $LINEAGE_SERVER) and a token in $LINEAGE_TOKEN "+
				"(an admin's, %s without --auth; or an approver's)",
				dir, h, serveURL(h.Command), filepath.Join(dir, "admin.token"))
		}
	}
	if err == nil {
		return newSession(dir, st), nil
	}
	// Another lineagec (or a service embedding the runtime) may hold the
	// directory: wait for it, saying so at once, for up to --lock-timeout.
	st, err = file.Open(dir, file.Options{
		ReadOnly:    how == readData,
		WaitForLock: g.lockTimeout > 0,
		LockTimeout: g.lockTimeout,
		OnLockWait: func(h file.LockHolder) {
			fmt.Fprintf(g.stderr, "lineagec: waiting for the data directory %s: it is in use by %s (giving up after %v; --lock-timeout)\n",
				dir, h, g.lockTimeout)
		},
	})
	if errors.Is(err, file.ErrLocked) && g.lockTimeout > 0 {
		return nil, fmt.Errorf("%w (--lock-timeout sets how long to wait)", err)
	}
	if err != nil {
		return nil, err
	}
	return newSession(dir, st), nil
}

// openSharedSession opens the PostgreSQL store at url. Other nodes may write
// to it meanwhile: the runtime catches up with their records before it
// answers or appends (docs/stores.md), as a serve node does.
func openSharedSession(url string) (*session, error) {
	st, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		return nil, fmt.Errorf("--store: %w", err)
	}
	return newSession("the PostgreSQL store", st), nil
}

func newSession(where string, st store.Store) *session {
	rt := runtime.Open(st, runtime.Options{})
	return &session{where: where, st: st, rt: rt}
}

// close closes the store, which releases the lock. Records were durable when
// they were acknowledged, so a failure here is only worth a warning: it must
// not turn an allow into an error exit.
func (s *session) close(stderr io.Writer) {
	if err := s.st.Close(); err != nil {
		fmt.Fprintf(stderr, "lineagec: warning: closing the store: %v\n", err)
	}
}

// agentError makes the runtime's and the store's errors about an agent id
// readable.
func (s *session) agentError(agent string, err error) error {
	switch {
	case errors.Is(err, lineage.ErrUnknownAgent), errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("unknown agent %q in %s (`lineagec agent list` shows the agents)", agent, s.where)
	case errors.Is(err, store.ErrBadAgent):
		return fmt.Errorf("%q is not an agent id", agent)
	}
	return err
}

// serveURL is the URL of the lineagec serve that a lock holder's command line
// (as its lock note gives it) runs, or "" if it is not a serve: its --addr
// (a wildcard host as the loopback one), https with --tls-cert.
func serveURL(command string) string {
	f := strings.Fields(command)
	if len(f) < 2 || !strings.Contains(filepath.Base(f[0]), "lineagec") {
		return ""
	}
	serve, scheme, addr := false, "http", "127.0.0.1:8181"
	for i := 1; i < len(f); i++ {
		a := f[i]
		switch {
		case a == "serve" && !serve:
			serve = true
		case a == "--addr" && i+1 < len(f):
			addr = f[i+1]
			i++
		case strings.HasPrefix(a, "--addr="):
			addr = strings.TrimPrefix(a, "--addr=")
		case a == "--tls-cert" || strings.HasPrefix(a, "--tls-cert="):
			scheme = "https"
		}
	}
	if !serve {
		return ""
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	if port == "0" {
		port = "PORT" // a port the system chose: serve printed it at start
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}
