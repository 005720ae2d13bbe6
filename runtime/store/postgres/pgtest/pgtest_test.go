package pgtest

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func query(t *testing.T, dbURL, sql string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, sql).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// TestURL pins what the tests rely on: a database of their own on a server
// that syncs its writes.
func TestURL(t *testing.T) {
	a, b := URL(t), URL(t)
	if a == b {
		t.Fatalf("two tests' databases share a URL: %s", a)
	}
	if got := query(t, a, "SHOW fsync"); got != "on" {
		t.Errorf("fsync = %s, want on", got)
	}
	if got := query(t, a, "SELECT current_database()"); got == query(t, b, "SELECT current_database()") {
		t.Errorf("two databases named %s", got)
	}
}

// TestRestart pins the outage tests' server: stopped, it refuses
// connections; started again, it serves the same data.
func TestRestart(t *testing.T) {
	s := Start(t)
	db := s.NewDatabase(t)
	query(t, db, "SELECT 1")
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if conn, err := pgx.Connect(context.Background(), db); err == nil {
		conn.Close(context.Background())
		t.Fatal("connected to a stopped server")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	query(t, db, "SELECT 1")
}

// TestPgbench pins the benchmark's ceiling: pgbench runs a custom script on
// a test's database, the rows land, and its tps is read.
func TestPgbench(t *testing.T) {
	db := URL(t)
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(context.Background(), "CREATE TABLE t (n bigint)")
	conn.Close(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tps := Pgbench(t, db, Bench{Script: "INSERT INTO t VALUES (1);\n", Clients: 2, Seconds: 1})
	n, _ := strconv.Atoi(query(t, db, "SELECT count(*)::text FROM t"))
	if tps <= 0 || n == 0 {
		t.Fatalf("pgbench: %v tps, %d rows", tps, n)
	}
	if _, err := parseTPS([]byte("number of failed transactions: 0 (0.000%)\n")); err == nil {
		t.Fatal("parsed a tps from output without one")
	}
}

// TestServerCPU pins the benchmark's reading of PostgreSQL's CPU: work on a
// connection shows as CPU of the server's processes.
func TestServerCPU(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	before, ok, err := ServerCPU(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		if os.Getenv(EnvURL) != "" {
			t.Skipf("the server at %s is not on this machine", EnvURL)
		}
		t.Fatal("the server that pgtest started: its processes not found in /proc")
	}
	var n int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM generate_series(1, 3000000)").Scan(&n); err != nil {
		t.Fatal(err)
	}
	after, _, err := ServerCPU(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if d := CPUSince(before, after); d <= 0 {
		t.Fatalf("counting 3,000,000 rows used %v of the server's CPU", d)
	}
}
