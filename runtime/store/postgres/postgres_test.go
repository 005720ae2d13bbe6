package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/postgres/pgtest"
	"github.com/lineage-guard/lineage/runtime/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var contract = storetest.Default

// open opens a store on url, closed when t ends unless the test closed it.
func open(t testing.TB, url string) *Store {
	t.Helper()
	s, err := Open(context.Background(), url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestContract runs the contract every store passes, each subtest on a
// fresh database.
func TestContract(t *testing.T) {
	storetest.Run(t, contract, func(t *testing.T) storetest.Store {
		s, err := Open(context.Background(), pgtest.URL(t), Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// exec runs sql on the database at url, as the role in url.
func exec(t testing.TB, url, sql string, args ...any) error {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// TestGroupCommit appends to 100 agents at once (run it with -race) and
// checks that the appends shared commits: fewer batches than appends.
func TestGroupCommit(t *testing.T) {
	s := open(t, pgtest.URL(t))
	const agents, perAgent = 100, 20
	for a := range agents {
		storetest.MustCreate(t, s, fmt.Sprintf("agt_%03d", a))
	}
	g0, a0 := s.groups.Load(), s.appends.Load()
	var wg sync.WaitGroup
	for a := range agents {
		wg.Go(func() {
			id := fmt.Sprintf("agt_%03d", a)
			for seq := uint64(0); seq < perAgent; seq++ {
				if err := s.Append(id, seq, storetest.Rec(id, seq)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	groups, appends := s.groups.Load()-g0, s.appends.Load()-a0
	if appends != agents*perAgent {
		t.Fatalf("%d appends committed, want %d", appends, agents*perAgent)
	}
	if groups*2 > appends {
		t.Errorf("%d appends in %d group commits: want at least 2 appends a commit", appends, groups)
	}
	t.Logf("%.1f appends a commit", float64(appends)/float64(groups))
	for a := range agents {
		storetest.WantLog(t, s, fmt.Sprintf("agt_%03d", a), perAgent)
	}
}

// TestGroupIsolation commits one group holding good appends and bad ones
// (a taken seq, a gap, an unknown agent, a multi-record append whose later
// seq is taken behind the store's back): every good append lands, every bad
// one fails alone with its own error.
func TestGroupIsolation(t *testing.T) {
	url := pgtest.URL(t)
	s := open(t, url)
	for _, id := range []string{"good1", "good2", "taken", "gap", "blocked"} {
		storetest.MustCreate(t, s, id)
		storetest.MustAppend(t, s, id, 0, 2)
	}
	// A row at seq 3 of "blocked" with seq 2 missing: only a writer that
	// bypasses the store can do this; the multi-record append at 2 then hits
	// a unique violation, which aborts the whole batch.
	if err := exec(t, url, `INSERT INTO lineage_records VALUES ('blocked', 3, 'x')`); err != nil {
		t.Fatal(err)
	}
	req := func(agent string, first uint64, n int) *appendReq {
		recs := make([][]byte, n)
		for i := range recs {
			recs[i] = storetest.Rec(agent, first+uint64(i))
		}
		return &appendReq{agent: agent, first: first, recs: recs, done: make(chan error, 1)}
	}
	group := []*appendReq{
		req("good1", 2, 1), req("taken", 1, 1), req("good2", 2, 3),
		req("gap", 5, 1), req("nobody", 0, 1), req("blocked", 2, 2),
	}
	s.commit(group)
	want := []error{nil, store.ErrSeq, nil, store.ErrSeq, store.ErrNotFound, store.ErrSeq}
	for i, r := range group {
		if err := <-r.done; !errors.Is(err, want[i]) || want[i] != nil && !strings.Contains(err.Error(), r.agent) {
			t.Errorf("append to %s at %d: %v, want %v naming the agent", r.agent, r.first, err, want[i])
		}
	}
	storetest.WantLog(t, s, "good1", 3)
	storetest.WantLog(t, s, "good2", 5)
	storetest.WantLog(t, s, "taken", 2)
	storetest.WantLog(t, s, "gap", 2)
}

// TestTwoNodesRace has two stores (two pools, as two nodes would) append to
// the same agent at the same seq at the same time, many times: exactly one
// wins each seq, the other gets ErrSeq, and the log holds the winner's bytes.
func TestTwoNodesRace(t *testing.T) {
	url := pgtest.URL(t)
	nodes := []*Store{open(t, url), open(t, url)}
	storetest.MustCreate(t, nodes[0], "agt_a")
	const rounds = 50
	var wins [2]int
	for seq := uint64(0); seq < rounds; seq++ {
		var errs [2]error
		var wg sync.WaitGroup
		start := make(chan struct{})
		for n, s := range nodes {
			wg.Go(func() {
				<-start
				recs := [][]byte{fmt.Appendf(nil, `{"node":%d,"seq":%d}`, n, seq)}
				if seq%5 == 4 { // some appends of two records
					recs = append(recs, fmt.Appendf(nil, `{"node":%d,"seq":%d,"second":true}`, n, seq))
				}
				errs[n] = s.Append("agt_a", base(seq), recs...)
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for n, err := range errs {
			switch {
			case err == nil && winner == -1:
				winner = n
			case err == nil:
				t.Fatalf("seq %d: both nodes won", seq)
			case !errors.Is(err, store.ErrSeq):
				t.Fatalf("seq %d: node %d: %v, want nil or ErrSeq", seq, n, err)
			}
		}
		if winner < 0 {
			t.Fatalf("seq %d: no node won: %v", seq, errs)
		}
		wins[winner]++
		got := storetest.ScanAll(t, nodes[1-winner], "agt_a")
		if w := fmt.Sprintf(`{"node":%d,"seq":%d}`, winner, seq); string(got[base(seq)]) != w {
			t.Fatalf("seq %d: the log holds %s, want the winner's %s", seq, got[base(seq)], w)
		}
		if len(got) != int(base(seq+1)) {
			t.Fatalf("after seq %d: %d records, want %d", seq, len(got), base(seq+1))
		}
	}
	t.Logf("wins: %v", wins)
}

// base is the first log seq of round r of TestTwoNodesRace: every fifth
// round appends two records.
func base(r uint64) uint64 { return r + r/5 }

// TestAppendOnly pins the triggers: the owner itself cannot update, delete
// or truncate records or agents.
func TestAppendOnly(t *testing.T) {
	url := pgtest.URL(t)
	s := open(t, url)
	storetest.MustCreate(t, s, "agt_a")
	storetest.MustAppend(t, s, "agt_a", 0, 2)
	for _, sql := range []string{
		`UPDATE lineage_records SET rec = 'x' WHERE agent = 'agt_a' AND seq = 1`,
		`DELETE FROM lineage_records WHERE agent = 'agt_a' AND seq = 1`,
		`TRUNCATE lineage_records`,
		`UPDATE lineage_agents SET agent = 'agt_b'`,
		`DELETE FROM lineage_agents`,
		`TRUNCATE lineage_agents, lineage_records`,
	} {
		err := exec(t, url, sql)
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg.Code != "23001" || !strings.Contains(pg.Message, "append-only") {
			t.Errorf("%s: %v, want the append-only refusal", sql, err)
		}
	}
	storetest.WantLog(t, s, "agt_a", 2)
}

// TestWriterGrants runs a store as a role that has only CONNECT, SELECT and
// INSERT (the grants docs/stores.md gives), on a schema made by Init.
func TestWriterGrants(t *testing.T) {
	url := pgtest.URL(t)
	if err := Init(context.Background(), url); err != nil {
		t.Fatal(err)
	}
	if err := Init(context.Background(), url); err != nil {
		t.Fatalf("Init again: %v", err)
	}
	role := fmt.Sprintf("lineage_writer_%d", time.Now().UnixNano())
	u, _ := neturl.Parse(url)
	db := strings.TrimPrefix(u.Path, "/")
	for _, sql := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT CONNECT ON DATABASE " + db + " TO " + role,
		"GRANT USAGE ON SCHEMA public TO " + role,
		"GRANT SELECT, INSERT ON lineage_agents, lineage_records TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON lineage_agent_index, lineage_pending TO " + role,
	} {
		if err := exec(t, url, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() {
		exec(t, url, "REVOKE ALL ON lineage_agents, lineage_records, lineage_agent_index, lineage_pending FROM "+role)
		exec(t, url, "REVOKE ALL ON SCHEMA public FROM "+role)
	})
	u.User = neturl.User(role)
	w := open(t, u.String())
	storetest.MustCreate(t, w, "agt_a")
	storetest.MustAppend(t, w, "agt_a", 0, 3)
	storetest.WantLog(t, w, "agt_a", 3)
	if err := w.Append("agt_a", 1, storetest.Rec("agt_a", 1)); !errors.Is(err, store.ErrSeq) {
		t.Errorf("Append at a taken seq as the writer: %v, want ErrSeq", err)
	}
	if ids, err := w.Agents(); err != nil || len(ids) != 1 {
		t.Errorf("Agents() = %q, %v", ids, err)
	}
	if err := exec(t, u.String(), `DELETE FROM lineage_records`); err == nil {
		t.Error("the writer deleted records")
	}
}

// TestOutage stops the database under a store: its calls fail with
// ErrUnavailable; once the database is back, the same store works again.
func TestOutage(t *testing.T) {
	if os.Getenv(pgtest.EnvURL) != "" {
		t.Log("outage test on a private server, not on " + pgtest.EnvURL)
	}
	srv := pgtest.Start(t)
	s, err := Open(context.Background(), srv.NewDatabase(t), Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.MustCreate(t, s, "agt_a")
	storetest.MustAppend(t, s, "agt_a", 0, 2)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Append("agt_a", 2, storetest.Rec("agt_a", 2)); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "agt_a") {
		t.Errorf("Append while the database is down: %v, want ErrUnavailable naming the agent", err)
	} else if errors.Is(err, store.ErrUnknownOutcome) {
		// Nothing reached a database that is down: not an unknown outcome
		// (D350 (an unconfirmed commit is an unknown outcome)).
		t.Errorf("Append while the database is down: %v, want no ErrUnknownOutcome", err)
	}
	if err := s.Scan("agt_a", func(uint64, []byte) error { return nil }); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Scan while the database is down: %v, want ErrUnavailable", err)
	}
	if _, err := s.Agents(); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Agents while the database is down: %v, want ErrUnavailable", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	storetest.WantLog(t, s, "agt_a", 2)
	storetest.MustAppend(t, s, "agt_a", 2, 1)
	storetest.WantLog(t, s, "agt_a", 3)
}

// TestScanChunks scans a log longer than a round trip's chunk while fn
// appends to it: Scan passes every record it began with, in order, and none
// appended since.
func TestScanChunks(t *testing.T) {
	s := open(t, pgtest.URL(t))
	storetest.MustCreate(t, s, "agt_a")
	const n = 2*scanChunk + 345
	for seq := 0; seq < n; seq += 100 {
		storetest.MustAppend(t, s, "agt_a", uint64(seq), min(100, n-seq))
	}
	k := uint64(0)
	err := s.Scan("agt_a", func(seq uint64, rec []byte) error {
		if seq != k || !bytes.Equal(rec, storetest.Rec("agt_a", seq)) {
			return fmt.Errorf("record %d: seq %d, %q", k, seq, rec)
		}
		k++
		if seq%scanChunk == scanChunk-1 { // appends between the chunks' round trips
			return s.Append("agt_a", n+seq/scanChunk, storetest.Rec("agt_a", n+seq/scanChunk))
		}
		return nil
	})
	if err != nil || k != n {
		t.Fatalf("Scan: %d records, %v; want %d", k, err, n)
	}
	storetest.WantLog(t, s, "agt_a", n+2)
}

// TestFirstUseRace opens several stores at once on an empty database, as
// nodes starting together would: the schema is made once, every Open works.
func TestFirstUseRace(t *testing.T) {
	url := pgtest.URL(t)
	const nodes = 6
	stores := make([]*Store, nodes)
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() { stores[i], errs[i] = Open(context.Background(), url, Options{}) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: Open: %v", i, err)
		}
		defer stores[i].Close()
	}
	storetest.MustCreate(t, stores[0], "agt_a")
	storetest.MustAppend(t, stores[1], "agt_a", 0, 2)
	storetest.WantLog(t, stores[nodes-1], "agt_a", 2)
}

// TestCloseWhileAppending closes a store under 50 appending agents: each
// Append returns nil or ErrClosed, and every acknowledged record is in the
// database for the next store.
func TestCloseWhileAppending(t *testing.T) {
	url := pgtest.URL(t)
	s, err := Open(context.Background(), url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const agents = 50
	acked := make([]uint64, agents)
	var wg sync.WaitGroup
	for a := range agents {
		id := fmt.Sprintf("agt_%02d", a)
		storetest.MustCreate(t, s, id)
		wg.Go(func() {
			for seq := uint64(0); ; seq++ {
				err := s.Append(id, seq, storetest.Rec(id, seq))
				if errors.Is(err, store.ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("Append(%s, %d): %v, want nil or ErrClosed", id, seq, err)
					return
				}
				acked[a] = seq + 1
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	again := open(t, url)
	for a := range agents {
		storetest.WantLog(t, again, fmt.Sprintf("agt_%02d", a), int(acked[a]))
	}
}

// TestDefaultPool pins the defaults that docs/stores.md states and that
// BenchmarkNodes sizes pgbench's ceiling by: 2 group commits in flight and a
// pool of 6 connections, unless the URL sets pool_max_conns (D174: two group commits in flight).
func TestDefaultPool(t *testing.T) {
	url := pgtest.URL(t)
	if got := open(t, url).pool.Config().MaxConns; got != 6 {
		t.Errorf("default pool: %d connections, want 6 (2 committers and 4 more)", got)
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	if got := open(t, url+sep+"pool_max_conns=3").pool.Config().MaxConns; got != 3 {
		t.Errorf("pool_max_conns=3: a pool of %d connections", got)
	}
}

// TestIndexBackfill: a database made before the indexes existed gets them,
// rebuilt from the logs, when a store opens it.
func TestIndexBackfill(t *testing.T) {
	url := pgtest.URL(t)
	s := open(t, url)
	storetest.Fleet(t, s)
	s.Close()
	if err := exec(t, url, `DROP TABLE lineage_agent_index; DROP TABLE lineage_pending`); err != nil {
		t.Fatal(err)
	}
	s = open(t, url)
	storetest.WantFleet(t, contract.Lists, s)
}

// TestCheckIndexOf: the index rows of every agent of the fleet agree with
// its log; a row changed, a pending row removed or added behind the store is
// a difference CheckIndexOf names (what `lineagec verify --store` warns of).
func TestCheckIndexOf(t *testing.T) {
	url := pgtest.URL(t)
	s := open(t, url)
	storetest.Fleet(t, s)
	ids, err := s.Agents()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if diff, err := s.CheckIndexOf(id); err != nil || len(diff) > 0 {
			t.Fatalf("CheckIndexOf(%s) = %q, %v; want no difference", id, diff, err)
		}
	}
	pending, _, err := s.ListPending(store.ListQuery{})
	if err != nil || len(pending) == 0 {
		t.Fatalf("the fleet has no pending request: %v", err)
	}
	p := pending[0]
	pgtest.Exec(t, url,
		`UPDATE lineage_agent_index SET status = 'terminated' WHERE agent = 'agt_02'`,
		fmt.Sprintf(`DELETE FROM lineage_pending WHERE agent = '%s' AND seq = %d`, p.Agent, p.Seq),
		`INSERT INTO lineage_pending (agent, seq, request_id, tool, args, at, cost) VALUES ('agt_05', 1, 'ghost', 't', '{}', 'x', 0)`)
	for _, c := range []struct{ agent, want string }{
		{"agt_02", "agent agt_02: index has"},
		{p.Agent, fmt.Sprintf("agent %s: pending request %q (seq %d) missing or different in the index", p.Agent, p.RequestID, p.Seq)},
		{"agt_05", `agent agt_05: the index has request "ghost" (seq 1) pending, the log does not`},
	} {
		diff, err := s.CheckIndexOf(c.agent)
		if err != nil || len(diff) != 1 || !strings.Contains(diff[0], c.want) {
			t.Errorf("CheckIndexOf(%s) = %q, %v; want one difference, %q", c.agent, diff, err, c.want)
		}
	}
	if diff, err := s.CheckIndexOf("agt_nobody"); err != nil || len(diff) > 0 {
		t.Errorf("CheckIndexOf of an agent without a log = %q, %v", diff, err)
	}
}
