// Package pgtest gives tests a real PostgreSQL: a server it starts itself
// (initdb into a temporary folder, postgres on a free loopback port, fsync on)
// or, when LINEAGE_TEST_POSTGRES is set, the server at that URL. Each test gets
// a fresh database of its own.
//
// A test package that uses the shared server calls Main from its TestMain, so
// the server is started once for the package's run (on first use) and stopped
// at the end. Start gives a test a private server that it may stop and start
// (outage tests).
//
// PostgreSQL refuses to run as root: as root, pgtest runs initdb and postgres
// as the "postgres" user, with the folder given to it. Without the binaries a
// test is skipped with the reason, except under CI=true, where it fails: CI
// must run the PostgreSQL tests.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the variable that points the tests at an existing server: a
// postgres:// URL of a role that may create databases.
const EnvURL = "LINEAGE_TEST_POSTGRES"

var (
	mainUsed atomic.Bool
	shared   struct {
		once sync.Once
		srv  *Server
		url  string // admin URL of the shared server
		err  error
	}
	dbCount atomic.Int64
)

// Main runs a package's tests (call it from TestMain) and stops the shared
// server, if a test started it, before the process exits.
func Main(m *testing.M) {
	mainUsed.Store(true)
	code := m.Run()
	if shared.srv != nil {
		if err := shared.srv.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stopping the server: %v\n", err)
		}
		shared.srv.remove()
	}
	os.Exit(code)
}

// URL returns the URL of a new, empty database for this test on the shared
// server; the database is dropped when the test ends. Without Main in the
// package's TestMain, the test gets a private server instead.
func URL(t testing.TB) string {
	t.Helper()
	if !mainUsed.Load() && os.Getenv(EnvURL) == "" {
		return Start(t).NewDatabase(t)
	}
	shared.once.Do(func() {
		if u := os.Getenv(EnvURL); u != "" {
			shared.url = u
			return
		}
		shared.srv, shared.err = start()
		if shared.err == nil {
			shared.url = shared.srv.AdminURL()
		}
	})
	if shared.err != nil {
		unavailable(t, shared.err)
	}
	return newDatabase(t, shared.url)
}

// Server is a PostgreSQL server that pgtest started.
type Server struct {
	dir  string // the temporary folder: data/, sock/, log
	bin  string // the folder of initdb and postgres
	port int
	cred *syscall.Credential // nil unless running as root
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan error // the server's exit
}

// Start starts a private server for t, stopped and removed when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := start()
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("pgtest: stopping the server: %v", err)
		}
		s.remove()
	})
	return s
}

// AdminURL is the URL of the server's "postgres" database as its superuser.
func (s *Server) AdminURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// NewDatabase creates a new, empty database for t and returns its URL.
func (s *Server) NewDatabase(t testing.TB) string { return newDatabase(t, s.AdminURL()) }

// Stop stops the server (a fast shutdown: open connections are cut).
func (s *Server) Stop() error { return s.stop() }

// Restart starts the stopped server again on the same port and data.
func (s *Server) Restart() error { return s.run() }

// unavailable skips t, or fails it under CI, where the tests must run.
func unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("pgtest: no PostgreSQL for the tests under CI: %v", err)
	}
	t.Skipf("pgtest: no PostgreSQL for the tests (set %s, or install initdb and postgres): %v", EnvURL, err)
}

// binDir finds the folder holding both initdb and postgres.
func binDir() (string, error) {
	dirs := []string{"/usr/local/bin"}
	versions, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(versions, func(i, j int) bool { return pgVersion(versions[i]) > pgVersion(versions[j]) })
	dirs = append(dirs, versions...)
	if p, err := exec.LookPath("postgres"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("initdb and postgres not found in /usr/local/bin, /usr/lib/postgresql/*/bin or $PATH")
}

func pgVersion(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExec(path string) bool {
	info, err := os.Stat(path)
	return err == nil && !info.IsDir() && info.Mode()&0o111 != 0
}

// start makes a new cluster in a temporary folder and starts its server.
func start() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin}
	tmp := os.TempDir()
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, and PostgreSQL refuses root: no postgres user to run it as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		tmp = "/tmp" // $TMPDIR may be a folder the postgres user cannot reach
	}
	if s.dir, err = os.MkdirTemp(tmp, "pgtest-"); err != nil {
		return nil, err
	}
	if err := s.initdb(); err != nil {
		s.remove()
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		if s.port, err = freePort(); err == nil {
			if err = s.run(); err == nil {
				return s, nil
			}
		}
		if attempt == 3 {
			s.remove()
			return nil, err
		}
	}
}

func (s *Server) initdb() error {
	for _, d := range []string{s.dir, filepath.Join(s.dir, "sock")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if s.cred != nil {
			if err := os.Chown(d, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				return err
			}
		}
	}
	cmd := s.command("initdb", "-D", filepath.Join(s.dir, "data"), "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return nil
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

// run starts postgres and waits until it accepts connections.
func (s *Server) run() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("pgtest: the server is running")
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := s.command("postgres", "-D", filepath.Join(s.dir, "data"),
		"-p", strconv.Itoa(s.port), "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+filepath.Join(s.dir, "sock"),
		"-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "max_connections=200")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, s.AdminURL())
		cancel()
		if err == nil {
			conn.Close(context.Background())
			s.cmd, s.done = cmd, done
			return nil
		}
		select {
		case werr := <-done:
			return fmt.Errorf("postgres exited (%v) before accepting connections; its log:\n%s", werr, s.log())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("postgres did not accept connections within a minute: %v; its log:\n%s", err, s.log())
		}
	}
}

func (s *Server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "log"))
	return string(b)
}

func (s *Server) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	cmd, done := s.cmd, s.done
	s.cmd, s.done = nil, nil
	cmd.Process.Signal(syscall.SIGINT) // fast shutdown
	select {
	case <-done:
		return nil
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		return errors.New("postgres did not stop within 30s: killed")
	}
}

func (s *Server) remove() { os.RemoveAll(s.dir) }

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// newDatabase creates a database on the server at adminURL and drops it when
// t ends.
func newDatabase(t testing.TB, adminURL string) string {
	t.Helper()
	u, err := url.Parse(adminURL)
	if err != nil || u.Scheme != "postgres" && u.Scheme != "postgresql" {
		t.Fatalf("pgtest: %s must be a postgres:// URL: %q", EnvURL, adminURL)
	}
	name := fmt.Sprintf("lineage_test_%d_%d", os.Getpid(), dbCount.Add(1))
	admin := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := admin("CREATE DATABASE " + name); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := admin("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil &&
			!strings.Contains(err.Error(), "connect") {
			t.Errorf("pgtest: dropping database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}
