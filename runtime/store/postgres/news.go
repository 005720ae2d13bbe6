package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lineage-guard/lineage/runtime/store"
)

// The news of appends between nodes (docs/stores.md, "One stream of news";
// D352 (news by NOTIFY in the append's transaction)): each append's batch
// also sends a NOTIFY on newsChannel, in the same implicit transaction, so
// the news goes out when, and only when, the records are committed. Its
// payload is "node agent first last": the store value that wrote, the agent
// and the seqs of the records. Listen holds a connection of its own that
// LISTENs and passes on the news of the other nodes.

const newsChannel = "lineage_news"

// notifyLanded notifies only if the append's last record is in the log with
// the bytes this append wrote: an append that lost its seq (ErrSeq) lands
// nothing and tells nothing.
const notifyLanded = `SELECT pg_notify('` + newsChannel + `', $1::text)
	WHERE EXISTS (SELECT 1 FROM lineage_records WHERE agent = $2::text AND seq = $3::bigint AND rec = $4::bytea)`

var _ store.News = (*Store)(nil)

func newNode() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// insertOneNews is insertOne that notifies if, and only if, its row landed:
// its command tag counts the rows landed as an INSERT's does.
const insertOneNews = `WITH ins AS (` + insertOne + ` RETURNING seq)
	SELECT pg_notify('` + newsChannel + `', $4::text) FROM ins`

// newsOf is the payload of r's news.
func (s *Store) newsOf(r *appendReq) string {
	last := r.first + uint64(len(r.recs)) - 1
	return s.node + " " + r.agent + " " + strconv.FormatUint(r.first, 10) + " " + strconv.FormatUint(last, 10)
}

// queueNews adds the NOTIFY of r, an append of several records, to b, right
// after r's insert.
func (s *Store) queueNews(b *pgx.Batch, r *appendReq) {
	last := r.first + uint64(len(r.recs)) - 1
	b.Queue(notifyLanded, s.newsOf(r), r.agent, int64(last), r.recs[len(r.recs)-1])
}

// parseNews reads a payload of queueNews.
func parseNews(p string) (node, agent string, first, last uint64, err error) {
	f := strings.Fields(p)
	if len(f) != 4 {
		return "", "", 0, 0, fmt.Errorf("news %q: want 4 fields", p)
	}
	if first, err = strconv.ParseUint(f[2], 10, 64); err == nil {
		last, err = strconv.ParseUint(f[3], 10, 64)
	}
	return f[0], f[1], first, last, err
}

// Listen implements store.News: a connection of its own, outside the pool,
// LISTENs on the news channel; when it fails, it is made again (after 50 ms,
// doubling up to 2 s) and gap is called, since news may have been missed
// meanwhile. It returns when ctx ends.
func (s *Store) Listen(ctx context.Context, fn func(agent string, first, last uint64), gap func()) {
	backoff := 50 * time.Millisecond
	for listened := false; ctx.Err() == nil; {
		ok, _ := s.listenOnce(ctx, fn, func() {
			if listened {
				gap()
			}
			listened = true
		})
		if ok {
			backoff = 50 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// listenOnce listens on one connection until it fails; ok says it listened.
func (s *Store) listenOnce(ctx context.Context, fn func(agent string, first, last uint64), listening func()) (ok bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	conn, err := pgx.ConnectConfig(cctx, s.pool.Config().ConnConfig.Copy())
	if err == nil {
		_, err = conn.Exec(cctx, "LISTEN "+newsChannel)
	}
	cancel()
	if conn != nil {
		defer func() {
			c, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			conn.Close(c)
		}()
	}
	if err != nil {
		return false, err
	}
	listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		node, agent, first, last, perr := parseNews(n.Payload)
		if perr != nil || node == s.node {
			continue // not ours to read, or our own append
		}
		fn(agent, first, last)
	}
}
