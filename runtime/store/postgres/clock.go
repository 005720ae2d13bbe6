package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// ClockSource returns a reader of the database's clock (clock_timestamp())
// on a connection of its own, outside the pool, so that a busy pool does
// not lengthen the round trip that bounds a node's clock error
// (internal/storeclock; docs/stores.md, "One clock"). The connection is
// made on first use and again after a failure; done closes it.
func (s *Store) ClockSource() (read func(ctx context.Context) (time.Time, error), done func()) {
	var (
		mu   sync.Mutex
		conn *pgx.Conn
	)
	done = func() {
		mu.Lock()
		defer mu.Unlock()
		if conn != nil {
			conn.Close(context.Background())
			conn = nil
		}
	}
	read = func(ctx context.Context) (time.Time, error) {
		mu.Lock()
		defer mu.Unlock()
		if conn == nil || conn.IsClosed() {
			c, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
			if err != nil {
				return time.Time{}, mapErr(err, "reading the clock of", "the database")
			}
			conn = c
		}
		var now time.Time
		if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
			conn.Close(context.Background())
			conn = nil
			return time.Time{}, mapErr(err, "reading the clock of", "the database")
		}
		return now, nil
	}
	return read, done
}
