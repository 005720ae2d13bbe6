package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lineage-guard/lineage/runtime/internal/index"
	"github.com/lineage-guard/lineage/runtime/store"
)

// The indexes (store.Lister): one row per agent and one per pending request,
// written in the transaction of the append that changes them, from
// store.IndexChangeOf. Unlike the log they are updated and deleted.
var indexSchema = []string{
	`CREATE TABLE IF NOT EXISTS lineage_agent_index (
		agent  text COLLATE "C" PRIMARY KEY,
		name   text NOT NULL DEFAULT '',
		status text NOT NULL DEFAULT 'alive',
		digest text NOT NULL DEFAULT '',
		seq    bigint NOT NULL DEFAULT 0,
		costs  jsonb
	)`,
	`CREATE INDEX IF NOT EXISTS lineage_agent_index_status ON lineage_agent_index (status, agent)`,
	`CREATE TABLE IF NOT EXISTS lineage_pending (
		agent      text COLLATE "C" NOT NULL,
		seq        bigint NOT NULL,
		request_id text NOT NULL,
		tool       text NOT NULL,
		args       bytea NOT NULL,
		at         text NOT NULL,
		cost       bigint NOT NULL,
		PRIMARY KEY (agent, seq)
	)`,
	`COMMENT ON TABLE lineage_agent_index IS
		'lineage: the agent index, derived from lineage_records in the transaction of each append; never decides anything'`,
}

// indexLanded is the condition that an append landed: its last record is
// the one this append wrote ($1 agent, $2 its seq, $3 its bytes).
const indexLanded = `EXISTS (SELECT 1 FROM lineage_records WHERE agent = $1::text AND seq = $2::bigint AND rec = $3::bytea)`

// queueIndex queues, after the insert of r, the index statements of its
// records; each applies only if the append landed. It returns how many.
func queueIndex(b *pgx.Batch, agent string, first uint64, recs [][]byte) int {
	last := first + uint64(len(recs)) - 1
	lastRec := recs[len(recs)-1]
	var (
		name, digest *string
		costs        []byte
		status       *string
		n            int
	)
	type pend struct {
		add *store.PendingRow
		rm  string
	}
	var pends []pend
	for i, rec := range recs {
		seq := first + uint64(i)
		ch, err := store.IndexChangeOf(agent, seq, rec)
		if err != nil {
			s := store.StatusDamaged
			status = &s
			continue
		}
		if ch.Name != nil {
			name = ch.Name
		}
		if ch.Costs != nil {
			digest = &ch.Digest
			costs, _ = json.Marshal(ch.Costs)
		}
		if ch.Terminated {
			s := store.StatusTerminated
			status = &s
			pends = append(pends, pend{rm: "*"})
		}
		if ch.AddPending != nil {
			pends = append(pends, pend{add: ch.AddPending})
		}
		if ch.RemovePending != "" {
			pends = append(pends, pend{rm: ch.RemovePending})
		}
	}
	// The agent row first: a pending request's cost reads its policy's costs.
	b.Queue(`UPDATE lineage_agent_index SET seq = $2::bigint,
			name = coalesce($4::text, name), digest = coalesce($5::text, digest),
			costs = coalesce($6::jsonb, costs),
			status = CASE WHEN status = 'damaged' THEN status ELSE coalesce($7::text, status) END
		WHERE agent = $1::text AND `+indexLanded, agent, int64(last), lastRec, name, digest, costs, status)
	n++
	for _, p := range pends {
		switch {
		case p.add != nil:
			b.Queue(`INSERT INTO lineage_pending (agent, seq, request_id, tool, args, at, cost)
				SELECT $1::text, $4::bigint, $5::text, $6::text, $7::bytea, $8::text,
					coalesce((i.costs->'tools'->>$6::text)::bigint, (i.costs->>'default')::bigint, 0)
				FROM lineage_agent_index i
				WHERE i.agent = $1::text AND i.status = 'alive' AND `+indexLanded+`
				ON CONFLICT DO NOTHING`,
				agent, int64(last), lastRec, int64(p.add.Seq), p.add.RequestID, p.add.Tool, []byte(p.add.Args), p.add.At)
		case p.rm == "*":
			b.Queue(`DELETE FROM lineage_pending WHERE agent = $1::text AND `+indexLanded, agent, int64(last), lastRec)
		default:
			b.Queue(`DELETE FROM lineage_pending WHERE agent = $1::text AND request_id = $4::text AND `+indexLanded,
				agent, int64(last), lastRec, p.rm)
		}
		n++
	}
	return n
}

// ListAgents implements store.Lister.
func (s *Store) ListAgents(q store.ListQuery) ([]store.AgentRow, string, error) {
	q, err := store.CheckListQuery(q)
	if err != nil {
		return nil, "", err
	}
	after, err := store.DecodeCursor(q.Cursor)
	if err != nil {
		return nil, "", err
	}
	if err := s.enter(); err != nil {
		return nil, "", err
	}
	defer s.leave()
	ctx, cancel := s.ctx()
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT agent, name, status, digest, seq FROM lineage_agent_index
		WHERE agent > $1::text AND ($2::text = '' OR status = $2::text) ORDER BY agent LIMIT $3`, after, q.Status, q.Limit+1)
	if err != nil {
		return nil, "", mapErr(err, "listing agents", "")
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.AgentRow, error) {
		var r store.AgentRow
		var seq int64
		err := row.Scan(&r.Agent, &r.Name, &r.Status, &r.Digest, &seq)
		r.Seq = uint64(seq)
		return r, err
	})
	if err != nil {
		return nil, "", mapErr(err, "listing agents", "")
	}
	next := ""
	if len(out) > q.Limit {
		out = out[:q.Limit]
		next = store.EncodeCursor(out[len(out)-1].Agent)
	}
	if out == nil {
		out = []store.AgentRow{}
	}
	return out, next, nil
}

// ListPending implements store.Lister.
func (s *Store) ListPending(q store.ListQuery) ([]store.PendingRow, string, error) {
	q, err := store.CheckListQuery(q)
	if err != nil {
		return nil, "", err
	}
	after, err := store.DecodeCursor(q.Cursor)
	if err != nil {
		return nil, "", err
	}
	agent, seq := "", int64(-1)
	if after != "" {
		a, sq, ok := store.ParsePendingKey(after)
		if !ok {
			return nil, "", fmt.Errorf("%w: %q", store.ErrBadCursor, q.Cursor)
		}
		agent, seq = a, int64(sq)
	}
	if err := s.enter(); err != nil {
		return nil, "", err
	}
	defer s.leave()
	ctx, cancel := s.ctx()
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT p.agent, coalesce(i.name, ''), p.request_id, p.seq, p.tool, p.args, p.at, p.cost
		FROM lineage_pending p LEFT JOIN lineage_agent_index i ON i.agent = p.agent
		WHERE (p.agent, p.seq) > ($1::text, $2::bigint) ORDER BY p.agent, p.seq LIMIT $3`, agent, seq, q.Limit+1)
	if err != nil {
		return nil, "", mapErr(err, "listing pending requests", "")
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.PendingRow, error) {
		var r store.PendingRow
		var seq int64
		var args []byte
		err := row.Scan(&r.Agent, &r.Name, &r.RequestID, &seq, &r.Tool, &args, &r.At, &r.Cost)
		r.Seq, r.Args = uint64(seq), args
		return r, err
	})
	if err != nil {
		return nil, "", mapErr(err, "listing pending requests", "")
	}
	next := ""
	if len(out) > q.Limit {
		out = out[:q.Limit]
		last := out[len(out)-1]
		next = store.EncodeCursor(store.PendingKey(last.Agent, last.Seq))
	}
	if out == nil {
		out = []store.PendingRow{}
	}
	return out, next, nil
}

var _ store.Lister = (*Store)(nil)

// backfillIndex writes the index rows of the agents that have none: the
// logs of a database made before the indexes existed. It runs in the
// transaction that creates the schema.
func backfillIndex(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT a.agent FROM lineage_agents a
		WHERE NOT EXISTS (SELECT 1 FROM lineage_agent_index i WHERE i.agent = a.agent) ORDER BY a.agent`)
	if err != nil {
		return err
	}
	agents, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, agent := range agents {
		if _, err := tx.Exec(ctx, `INSERT INTO lineage_agent_index (agent) VALUES ($1)`, agent); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT rec FROM lineage_records WHERE agent = $1 ORDER BY seq`, agent)
		if err != nil {
			return err
		}
		recs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			continue
		}
		b := &pgx.Batch{}
		for i := range recs {
			queueIndex(b, agent, uint64(i), recs[i:i+1])
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
	}
	return nil
}

// CheckIndexOf implements store.IndexChecker: it reads agent's log and its
// rows of lineage_agent_index and lineage_pending, and returns one line per
// difference between them (`lineagec verify` warns of each). A damaged
// agent's row holds no reason (the file and memory stores keep one), so the
// status alone is compared.
func (s *Store) CheckIndexOf(agent string) ([]string, error) {
	if err := store.CheckAgent(agent); err != nil {
		return nil, err
	}
	want := index.New()
	err := s.Scan(agent, func(seq uint64, rec []byte) error {
		want.Apply(agent, seq, 0, [][]byte{rec})
		return nil
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		want = index.New()
	case err != nil:
		return nil, err
	default:
		want.Create(agent)
	}
	snap := want.Snapshot()
	for i := range snap.Agents {
		snap.Agents[i].Error = ""
	}
	want, _ = index.FromSnapshot(snap)

	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	ctx, cancel := s.ctx()
	defer cancel()
	var have index.Snapshot
	var row store.AgentRow
	var seq int64
	err = s.pool.QueryRow(ctx, `SELECT agent, name, status, digest, seq FROM lineage_agent_index WHERE agent = $1::text`, agent).
		Scan(&row.Agent, &row.Name, &row.Status, &row.Digest, &seq)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, mapErr(err, "checking the index", agent)
	default:
		row.Seq = uint64(seq)
		have.Agents = append(have.Agents, index.SnapshotRow{AgentRow: row})
	}
	rows, err := s.pool.Query(ctx, `SELECT agent, request_id, seq, tool, args, at, cost FROM lineage_pending WHERE agent = $1::text ORDER BY seq`, agent)
	if err != nil {
		return nil, mapErr(err, "checking the index", agent)
	}
	pending, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.PendingRow, error) {
		var r store.PendingRow
		var seq int64
		var args []byte
		err := row.Scan(&r.Agent, &r.RequestID, &seq, &r.Tool, &args, &r.At, &r.Cost)
		r.Seq, r.Args = uint64(seq), args
		return r, err
	})
	if err != nil {
		return nil, mapErr(err, "checking the index", agent)
	}
	var out []string
	if len(have.Agents) == 0 && len(pending) > 0 {
		out = append(out, fmt.Sprintf("agent %s: the index has %d pending requests and no row of the agent", agent, len(pending)))
		pending = nil
	}
	have.Pending = pending
	hx, ok := index.FromSnapshot(have)
	if !ok {
		return nil, fmt.Errorf("store: postgres: %s: the index rows cannot be read", agent)
	}
	return append(out, index.Diff(hx, want, agent)...), nil
}

var _ store.IndexChecker = (*Store)(nil)
