package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// Bench is one pgbench run: Script (pgbench's script language) run by
// Clients connections, each transaction one run of the script, for Seconds.
type Bench struct {
	Script  string
	Clients int
	Seconds int
}

// Pgbench runs b against the database at url with PostgreSQL's own pgbench
// (no initialization, no vacuum, prepared statements, as many threads as
// clients up to 2) and returns the transactions per second it reports,
// connection time excluded. Without pgbench a test is skipped, or fails under
// CI=true; a run that fails, or whose output has no tps, fails the test.
func Pgbench(t testing.TB, url string, b Bench) float64 {
	t.Helper()
	bin, err := pgbenchBin()
	if err != nil {
		unavailable(t, err)
	}
	script := filepath.Join(t.TempDir(), "bench.sql")
	if err := os.WriteFile(script, []byte(b.Script), 0o644); err != nil {
		t.Fatal(err)
	}
	tps, out, err := runPgbench(bin, url, script, b)
	if err != nil {
		t.Fatalf("pgtest: pgbench -f %s -c %d -T %d: %v\n%s", script, b.Clients, b.Seconds, err, out)
	}
	return tps
}

func runPgbench(bin, url, script string, b Bench) (float64, []byte, error) {
	if b.Clients < 1 || b.Seconds < 1 {
		return 0, nil, fmt.Errorf("want at least 1 client and 1 second, have %d and %d", b.Clients, b.Seconds)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(b.Seconds)*time.Second+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-n", "-M", "prepared", "-f", script,
		"-c", strconv.Itoa(b.Clients), "-j", strconv.Itoa(min(b.Clients, 2)),
		"-T", strconv.Itoa(b.Seconds), url)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return 0, out.Bytes(), err
	}
	tps, err := parseTPS(out.Bytes())
	return tps, out.Bytes(), err
}

// tpsLine is pgbench's result line: "tps = 5432.1 (without initial
// connection time)" (PostgreSQL 14 and later) or "(excluding connections
// establishing)" (13).
var tpsLine = regexp.MustCompile(`(?m)^tps = ([0-9]+(?:\.[0-9]+)?) \((?:without initial connection time|excluding connections establishing)\)`)

func parseTPS(out []byte) (float64, error) {
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return 0, errors.New("no \"tps = N (without initial connection time)\" line in pgbench's output")
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// pgbenchBin finds pgbench: next to initdb and postgres, else on $PATH.
func pgbenchBin() (string, error) {
	if d, err := binDir(); err == nil && isExec(filepath.Join(d, "pgbench")) {
		return filepath.Join(d, "pgbench"), nil
	}
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	return "", errors.New("pgbench not found next to initdb and postgres or in $PATH (Debian: package postgresql)")
}
