// Package postgres is the store.Store of agents' logs in PostgreSQL (13 or
// later), which several guard nodes may share (docs/stores.md).
//
// It owns the schema (a table of agents and a table of records keyed by
// (agent, seq), both append-only by trigger), the mapping of PostgreSQL's
// errors to the store's sentinels (in one place, mapErr), and group commit:
// appends of different agents that arrive together are sent as one pipelined
// batch, which PostgreSQL runs as one transaction with one WAL flush, and an
// append that loses its seq to another writer never fails the others. It
// holds the same bytes as the file store's lines, so an export of a log is
// byte for byte the file store's file. It knows nothing of hashes or
// verdicts: the chain lives in package runtime.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lineage-guard/lineage/runtime/store"
)

// Options tune a Store; the zero value is the default.
type Options struct {
	// Committers is the number of group commits in flight at once, each on a
	// connection of its own (default 2, D174 (two group commits in flight)). The pool has Committers+4
	// connections unless the URL sets pool_max_conns.
	Committers int
	// Timeout bounds each round of work with the database (a group commit, a
	// chunk of a scan, a connection attempt); default 10s. A database that
	// does not answer in time is unavailable (store.ErrUnavailable).
	Timeout time.Duration
}

const (
	// defaultCommitters: two group commits in flight keep a commit's round
	// trip overlapped while making groups twice the size of four's, which
	// costs PostgreSQL less CPU a decision with several nodes (D174: two group commits in flight).
	defaultCommitters = 2
	maxGroup          = 256     // appends in one group commit
	maxGroupBytes     = 4 << 20 // record bytes in one group commit
	scanChunk         = 1000    // records read per round trip of Scan
)

// Store is a store.Store in a PostgreSQL database. It is safe for
// concurrent use, also by several processes on the same database.
type Store struct {
	pool    *pgxpool.Pool
	timeout time.Duration
	queue   chan *appendReq

	mu       sync.Mutex // guards closed and inflight.Add
	closed   bool
	inflight sync.WaitGroup // calls in progress
	workers  sync.WaitGroup

	groups, appends atomic.Int64 // group commits sent, appends in them

	node string // this store value's name in its news (news.go)
}

var _ store.Store = (*Store)(nil)

type appendReq struct {
	agent string
	first uint64
	recs  [][]byte
	size  int
	done  chan error
}

// Open connects to the database at url (a postgres:// URL or a key=value
// connection string, see pgx) and creates the schema if it is missing. The
// session always runs with synchronous_commit on: an acknowledged append is
// flushed to the database's WAL. Open fails (store.ErrUnavailable) if the
// database cannot be reached.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.Committers <= 0 {
		opts.Committers = defaultCommitters
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store: postgres: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "lineage"
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = opts.Timeout
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = int32(opts.Committers + 4)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: postgres: %w", err)
	}
	s := &Store{pool: pool, timeout: opts.Timeout, queue: make(chan *appendReq, maxGroup), node: newNode()}
	octx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	ok, err := hasSchema(octx, pool)
	if err == nil && !ok {
		err = createSchema(octx, pool)
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	for range opts.Committers {
		s.workers.Add(1)
		go s.committer()
	}
	return s, nil
}

// enter admits a call unless the store is closed; leave ends it.
func (s *Store) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	s.inflight.Add(1)
	return nil
}

func (s *Store) leave() { s.inflight.Done() }

func (s *Store) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.timeout)
}

// Create implements store.Store.
func (s *Store) Create(agent string) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if err := store.CheckAgent(agent); err != nil {
		return err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	// The agent's index row comes with it, in the same statement.
	var made int64
	err := s.pool.QueryRow(ctx, `WITH a AS (INSERT INTO lineage_agents (agent) VALUES ($1) ON CONFLICT DO NOTHING RETURNING agent),
		i AS (INSERT INTO lineage_agent_index (agent) SELECT agent FROM a ON CONFLICT DO NOTHING)
		SELECT count(*) FROM a`, agent).Scan(&made)
	if err != nil {
		return mapErr(err, "creating", agent)
	}
	if made == 0 {
		return fmt.Errorf("%w: %s", store.ErrExists, agent)
	}
	return nil
}

// Append implements store.Store. The append joins the next group commit;
// it returns once that transaction is committed (or failed).
func (s *Store) Append(agent string, firstSeq uint64, recs ...[]byte) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if err := store.CheckAgent(agent); err != nil {
		return err
	}
	size, err := store.CheckRecords(agent, firstSeq, recs)
	if err != nil {
		return err
	}
	if firstSeq > math.MaxInt64-uint64(len(recs)) {
		return fmt.Errorf("%w: %s: append at seq %d: beyond any log", store.ErrSeq, agent, firstSeq)
	}
	if len(recs) == 0 {
		ctx, cancel := s.ctx()
		defer cancel()
		return s.refusal(ctx, agent, firstSeq, true)
	}
	r := &appendReq{agent: agent, first: firstSeq, recs: recs, size: size, done: make(chan error, 1)}
	s.queue <- r
	return <-r.done
}

// committer sends group commits: it takes one pending append, every other
// one already waiting (up to maxGroup appends or maxGroupBytes), and commits
// them together.
func (s *Store) committer() {
	defer s.workers.Done()
	var group []*appendReq
	for r := range s.queue {
		group = append(group[:0], r)
		size := r.size
	drain:
		for len(group) < maxGroup && size < maxGroupBytes {
			select {
			case r, ok := <-s.queue:
				if !ok {
					break drain
				}
				group = append(group, r)
				size += r.size
			default:
				break drain
			}
		}
		s.commit(group)
		clear(group)
	}
}

// The two INSERTs of an append. Each inserts its records only if the
// predecessor of the first is in the log (seq 0: if the agent exists), and
// inserts nothing, without an error, if the first seq is taken (ON CONFLICT
// DO NOTHING): a lost race is a row count of 0, and the batch goes on. In
// the multi-record form the later records go in only if the first did; once
// an append owns its first seq, no writer can hold the seqs after it, so a
// conflict there is a unique violation (it aborts the batch; see commit).
const (
	insertOne = `INSERT INTO lineage_records (agent, seq, rec)
		SELECT $1::text, $2::bigint, $3::bytea
		WHERE CASE WHEN $2::bigint = 0
			THEN EXISTS (SELECT 1 FROM lineage_agents WHERE agent = $1::text)
			ELSE EXISTS (SELECT 1 FROM lineage_records WHERE agent = $1::text AND seq = $2::bigint - 1) END
		ON CONFLICT DO NOTHING`
	insertMany = `WITH first AS (
			INSERT INTO lineage_records (agent, seq, rec)
			SELECT $1::text, $2::bigint, ($3::bytea[])[1]
			WHERE CASE WHEN $2::bigint = 0
				THEN EXISTS (SELECT 1 FROM lineage_agents WHERE agent = $1::text)
				ELSE EXISTS (SELECT 1 FROM lineage_records WHERE agent = $1::text AND seq = $2::bigint - 1) END
			ON CONFLICT DO NOTHING
			RETURNING seq),
		rest AS (
			INSERT INTO lineage_records (agent, seq, rec)
			SELECT $1::text, $2::bigint + r.i - 1, r.rec
			FROM unnest($3::bytea[]) WITH ORDINALITY AS r(rec, i)
			WHERE r.i > 1 AND EXISTS (SELECT 1 FROM first)
			RETURNING seq)
		SELECT (SELECT count(*) FROM first) + (SELECT count(*) FROM rest)`
)

// commit writes group in one batch: one round trip, one implicit
// transaction, one WAL flush. An append whose seq is taken lands no row and
// fails alone. If the batch fails as a whole for a reason other than the
// database being unavailable, each append is retried in a transaction of its
// own, so that one bad append does not fail the others.
func (s *Store) commit(group []*appendReq) {
	ctx, cancel := s.ctx()
	defer cancel()
	landed, err := s.send(ctx, group)
	if err != nil && pgconn.SafeToRetry(err) { // a stale connection: nothing was sent
		landed, err = s.send(ctx, group)
	}
	switch {
	case err == nil:
		for i, r := range group {
			if landed[i] {
				r.done <- nil
			} else {
				r.done <- s.refusal(ctx, r.agent, r.first, false)
			}
		}
	case len(group) > 1 && !errors.Is(mapErr(err, "", ""), store.ErrUnavailable):
		for _, r := range group {
			s.commit([]*appendReq{r})
		}
	default:
		for _, r := range group {
			r.done <- appendErr(err, fmt.Sprintf("appending at seq %d to", r.first), r.agent)
		}
	}
}

// appendErr is mapErr for a batch of appends: where the batch may have
// reached the database and its commit was not confirmed (the connection
// was lost or timed out after sending), the error wraps
// store.ErrUnknownOutcome as well, so that the service answers
// unknown_outcome rather than unavailable (D350 (an unconfirmed commit is
// an unknown outcome)). Nothing was sent if pgx says so (SafeToRetry) or
// no connection could be made.
func appendErr(err error, doing, agent string) error {
	m := mapErr(err, doing, agent)
	var ce *pgconn.ConnectError
	// A batch that failed while its statements were being prepared never ran
	// one of them: pgx prepares and syncs before it sends the batch's queries.
	var pe pgx.ErrPreprocessingBatch
	if !errors.Is(m, store.ErrUnavailable) || pgconn.SafeToRetry(err) || errors.As(err, &ce) || errors.As(err, &pe) {
		return m
	}
	return fmt.Errorf("%w: %w", store.ErrUnknownOutcome, m)
}

// send runs group as one pipelined batch and reports which appends landed.
// It returns only after the transaction is committed or has failed.
func (s *Store) send(ctx context.Context, group []*appendReq) ([]bool, error) {
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, 3*len(group))}
	nIndex := make([]int, len(group))
	for i, r := range group {
		if len(r.recs) == 1 { // the insert tells its news itself (news.go)
			b.Queue(insertOneNews, r.agent, int64(r.first), r.recs[0], s.newsOf(r))
		} else {
			b.Queue(insertMany, r.agent, int64(r.first), r.recs)
			s.queueNews(b, r)
		}
		// The indexes, in the same transaction (docs/decisions.md: the
		// indexes written with the append).
		nIndex[i] = queueIndex(b, r.agent, r.first, r.recs)
	}
	br := s.pool.SendBatch(ctx, b)
	landed := make([]bool, len(group))
	var err error
	for i, r := range group {
		if len(r.recs) == 1 {
			var tag pgconn.CommandTag
			if tag, err = br.Exec(); err == nil {
				landed[i] = tag.RowsAffected() == 1
			}
		} else {
			var n int64
			if err = br.QueryRow().Scan(&n); err == nil {
				landed[i] = n == int64(len(r.recs))
				if n != 0 && !landed[i] { // the statement lands all or nothing
					err = fmt.Errorf("%w: %s: %d of %d records landed", errBug, r.agent, n, len(r.recs))
				}
			}
		}
		if err == nil && len(r.recs) > 1 {
			_, err = br.Exec() // the news of this append (news.go)
		}
		for range nIndex[i] {
			if err == nil {
				_, err = br.Exec()
			}
		}
		if err != nil {
			break
		}
	}
	// Close reads up to the end of the batch: the implicit transaction's
	// commit. Only then is anything acknowledged.
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	s.groups.Add(1)
	s.appends.Add(int64(len(group)))
	return landed, nil
}

// refusal says why an append at firstSeq landed nothing (ErrNotFound or
// ErrSeq), or, if ok is set (an append of no records), returns nil when
// firstSeq is the log's length.
func (s *Store) refusal(ctx context.Context, agent string, firstSeq uint64, ok bool) error {
	exists, have, err := s.length(ctx, agent)
	switch {
	case err != nil:
		return err
	case !exists:
		return fmt.Errorf("%w: %s", store.ErrNotFound, agent)
	case ok && have == firstSeq:
		return nil
	}
	return store.SeqError(agent, "", firstSeq, have)
}

// length reports whether agent has a log and how many records it holds.
func (s *Store) length(ctx context.Context, agent string) (exists bool, n uint64, err error) {
	var next int64
	err = s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM lineage_agents WHERE agent = $1),
		coalesce((SELECT max(seq) + 1 FROM lineage_records WHERE agent = $1), 0)`, agent).Scan(&exists, &next)
	if err != nil {
		return false, 0, mapErr(err, "reading the length of", agent)
	}
	return exists, uint64(next), nil
}

// Scan implements store.Store. It reads the log in chunks of scanChunk
// records, each in a round trip of its own, and calls fn between them with no
// connection held (fn may Append). The last seq is fixed by the first chunk:
// Scan sees what was committed when it began, and nothing appended since.
func (s *Store) Scan(agent string, fn func(seq uint64, rec []byte) error) error {
	return s.scan(agent, 0, fn)
}

// ScanFrom implements store.FromScanner: Scan from seq from on, which costs
// one round trip when the runtime catches up with a log that another node
// appended to (and finds nothing new, the common case). Beyond the log's end
// it returns nil without asking whether the agent exists.
func (s *Store) ScanFrom(agent string, from uint64, fn func(seq uint64, rec []byte) error) error {
	if from > math.MaxInt64 {
		return nil
	}
	return s.scan(agent, int64(from), fn)
}

// Shared implements store.Shared: other nodes may append to the database.
func (s *Store) Shared() bool { return true }

func (s *Store) scan(agent string, from int64, fn func(seq uint64, rec []byte) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	if err := store.CheckAgent(agent); err != nil {
		return err
	}
	var (
		next        = from // the next seq to read
		last  int64 = -1
		chunk []record
	)
	for first := true; ; first = false {
		var err error
		chunk, err = s.readChunk(agent, next, first, &last, chunk[:0])
		if err != nil {
			return err
		}
		if first && len(chunk) == 0 {
			if from > 0 {
				return nil
			}
			ctx, cancel := s.ctx()
			exists, _, err := s.length(ctx, agent)
			cancel()
			if err != nil {
				return err
			}
			if !exists {
				return fmt.Errorf("%w: %s", store.ErrNotFound, agent)
			}
			return nil
		}
		for _, r := range chunk {
			if r.seq != next {
				return &store.DamageError{Agent: agent, Path: "postgres", Seq: uint64(next), Offset: -1,
					Reason: fmt.Sprintf("record %d is missing (the next row is seq %d)", next, r.seq)}
			}
			if err := fn(uint64(r.seq), r.rec); err != nil {
				return err
			}
			next++
		}
		if next > last || len(chunk) < scanChunk {
			return nil
		}
	}
}

type record struct {
	seq int64
	rec []byte
}

// readChunk appends to dst up to scanChunk records of agent from seq from
// on, not beyond *last; the first chunk sets *last to the log's last seq.
func (s *Store) readChunk(agent string, from int64, first bool, last *int64, dst []record) ([]record, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	var (
		rows pgx.Rows
		err  error
	)
	if first {
		rows, err = s.pool.Query(ctx, `SELECT seq, rec,
			(SELECT max(seq) FROM lineage_records WHERE agent = $1)
			FROM lineage_records WHERE agent = $1 AND seq >= $3 ORDER BY seq LIMIT $2`, agent, scanChunk, from)
	} else {
		rows, err = s.pool.Query(ctx, `SELECT seq, rec FROM lineage_records
			WHERE agent = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq LIMIT $4`, agent, from, *last, scanChunk)
	}
	if err != nil {
		return nil, mapErr(err, "reading", agent)
	}
	defer rows.Close()
	for rows.Next() {
		var r record
		if first {
			err = rows.Scan(&r.seq, &r.rec, last)
		} else {
			err = rows.Scan(&r.seq, &r.rec)
		}
		if err != nil {
			return nil, mapErr(err, "reading", agent)
		}
		dst = append(dst, r)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err, "reading", agent)
	}
	return dst, nil
}

// Agents implements store.Store.
func (s *Store) Agents() ([]string, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	ctx, cancel := s.ctx()
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT agent FROM lineage_agents ORDER BY agent`)
	if err != nil {
		return nil, mapErr(err, "listing agents", "")
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, mapErr(err, "listing agents", "")
	}
	return ids, nil
}

// Stats counts a Store's group commits since Open.
type Stats struct {
	Commits int64 // group commits that committed
	Appends int64 // appends in them
}

// Stats returns the store's counts of group commits (for benchmarks: the
// appends a commit tell how well group commit works under a load).
func (s *Store) Stats() Stats {
	return Stats{Commits: s.groups.Load(), Appends: s.appends.Load()}
}

// Close implements store.Store: calls in progress complete first, then the
// committers stop and the pool closes.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	s.closed = true
	s.mu.Unlock()
	s.inflight.Wait()
	close(s.queue)
	s.workers.Wait()
	s.pool.Close()
	return nil
}

// errBug marks an answer of the database that the store's statements rule
// out: a bug, not an outage.
var errBug = errors.New("store: postgres: unexpected answer of the database")

// mapErr turns an error of pgx into the store's: the one place where
// PostgreSQL's errors meet the sentinels. doing and agent say what failed.
func mapErr(err error, doing, agent string) error {
	where := strings.TrimSpace(doing + " " + agent)
	var pg *pgconn.PgError
	if errors.Is(err, errBug) {
		return fmt.Errorf("%s: %w", where, err)
	}
	if !errors.As(err, &pg) {
		// Not an answer of the server: the connection failed, timed out or
		// could not be made.
		return fmt.Errorf("%w: postgres: %s: %w", store.ErrUnavailable, where, err)
	}
	switch {
	case pg.Code == "23505" && pg.ConstraintName == "lineage_records_pkey": // the seq is taken
		return fmt.Errorf("%w: %s: %s", store.ErrSeq, where, pg.Message)
	case pg.Code == "23505" && pg.ConstraintName == "lineage_agents_pkey":
		return fmt.Errorf("%w: %s: %s", store.ErrExists, where, pg.Message)
	case strings.HasPrefix(pg.Code, "08"), // connection exception
		pg.Code == "57P01", pg.Code == "57P02", pg.Code == "57P03", // shutting down, starting up
		pg.Code == "53300", pg.Code == "53400": // too many connections, configuration limit
		return fmt.Errorf("%w: postgres: %s: %w", store.ErrUnavailable, where, err)
	case pg.Code == "42P01": // undefined_table
		return fmt.Errorf("store: postgres: %s: no lineage schema in this database (run `lineagec store init --store URL`): %w", where, err)
	case pg.Code == "42501": // insufficient_privilege
		return fmt.Errorf("store: postgres: %s: the role lacks a privilege (writing needs SELECT and INSERT on lineage_agents and lineage_records, and SELECT, INSERT, UPDATE and DELETE on lineage_agent_index and lineage_pending): %w", where, err)
	}
	return fmt.Errorf("store: postgres: %s: %w", where, err)
}
