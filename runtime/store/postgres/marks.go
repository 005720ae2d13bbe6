package postgres

import (
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/lineage-guard/lineage/runtime/store"
)

var _ store.Marks = (*Store)(nil)

// LoadMark implements store.Marks: the highest checkpoint any node sharing
// the database signed of agent's log (D254 (the signed size shared by the
// nodes)).
func (s *Store) LoadMark(agent string) (store.Mark, error) {
	if err := s.enter(); err != nil {
		return store.Mark{}, err
	}
	defer s.leave()
	ctx, cancel := s.ctx()
	defer cancel()
	var m store.Mark
	var size int64
	err := s.pool.QueryRow(ctx, `SELECT size, head FROM lineage_checkpoints WHERE agent = $1`, agent).Scan(&size, &m.Head)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Mark{}, nil
	}
	if err != nil {
		return store.Mark{}, mapErr(err, "reading the checkpoint mark", agent)
	}
	m.Size = uint64(size)
	return m, nil
}

// StoreMark implements store.Marks: the row only ever rises (a lower mark
// leaves it as it is, and the table's trigger refuses an UPDATE that does not raise
// it, a DELETE and a TRUNCATE).
func (s *Store) StoreMark(agent string, m store.Mark) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	ctx, cancel := s.ctx()
	defer cancel()
	_, err := s.pool.Exec(ctx, `INSERT INTO lineage_checkpoints (agent, size, head) VALUES ($1, $2, $3)
		ON CONFLICT (agent) DO UPDATE SET size = EXCLUDED.size, head = EXCLUDED.head
		WHERE lineage_checkpoints.size < EXCLUDED.size`, agent, int64(m.Size), m.Head)
	if err != nil {
		return mapErr(err, "keeping the checkpoint mark", agent)
	}
	return nil
}
