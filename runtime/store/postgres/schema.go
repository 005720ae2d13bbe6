package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// schemaLock is the advisory lock key that serializes schema creation, so
// that two nodes starting at once on an empty database do not collide.
const schemaLock = 0x6c696e6561676531 // "lineage1"

// schema creates the tables (one row per record, keyed by (agent, seq), and
// one row per agent so that an empty log exists), and the triggers that make
// both append-only. Every statement is idempotent: Init may run again.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS lineage_agents (
		agent      text COLLATE "C" PRIMARY KEY
		           CHECK (agent ~ '^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$'),
		created_at timestamptz NOT NULL DEFAULT now()
	)`,
	`CREATE TABLE IF NOT EXISTS lineage_records (
		agent text COLLATE "C" NOT NULL,
		seq   bigint NOT NULL CHECK (seq >= 0),
		rec   bytea NOT NULL CHECK (octet_length(rec) > 0),
		PRIMARY KEY (agent, seq)
	)`,
	`COMMENT ON TABLE lineage_records IS
		'lineage: one row per log record, the bytes of the file store''s line without its newline; append-only'`,
	`CREATE OR REPLACE FUNCTION lineage_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		RAISE EXCEPTION 'lineage: % on %: the log is append-only, records are never updated or deleted',
			TG_OP, TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
	END
	$$`,
	refuseTrigger("lineage_records", "row", "UPDATE OR DELETE"),
	refuseTrigger("lineage_records", "statement", "TRUNCATE"),
	refuseTrigger("lineage_agents", "row", "UPDATE OR DELETE"),
	refuseTrigger("lineage_agents", "statement", "TRUNCATE"),
	// The size and head of the last checkpoint a node signed of each agent's
	// log, shared by the nodes: it only rises (D254 (the signed size shared
	// by the nodes)).
	`CREATE TABLE IF NOT EXISTS lineage_checkpoints (
		agent text COLLATE "C" PRIMARY KEY
		      CHECK (agent ~ '^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$'),
		size  bigint NOT NULL CHECK (size > 0),
		head  text NOT NULL CHECK (head ~ '^sha256:[0-9a-f]{64}$')
	)`,
	`CREATE OR REPLACE FUNCTION lineage_keep_mark() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF TG_OP = 'UPDATE' AND NEW.size > OLD.size THEN
			RETURN NEW;
		END IF;
		RAISE EXCEPTION 'lineage: % on %: a checkpoint mark only rises, it is never lowered or removed',
			TG_OP, TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
	END
	$$`,
	triggerNamed("lineage_checkpoints_only_rise_row", "lineage_checkpoints", "row", "UPDATE OR DELETE", "lineage_keep_mark"),
	triggerNamed("lineage_checkpoints_only_rise_statement", "lineage_checkpoints", "statement", "TRUNCATE", "lineage_keep_mark"),
}

// refuseTrigger creates, unless it exists, the trigger that refuses events on
// table (CREATE OR REPLACE TRIGGER needs PostgreSQL 14; docs/stores.md promises 13).
func refuseTrigger(table, level, events string) string {
	return triggerNamed(table+"_append_only_"+level, table, level, events, "lineage_refuse_change")
}

// triggerNamed creates, unless it exists, the trigger name on table that
// runs fn before events.
func triggerNamed(name, table, level, events, fn string) string {
	return fmt.Sprintf(`DO $$ BEGIN
		IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = '%[1]s' AND tgrelid = '%[2]s'::regclass) THEN
			CREATE TRIGGER %[1]s BEFORE %[3]s ON %[2]s FOR EACH %[4]s EXECUTE FUNCTION %[5]s();
		END IF;
	END $$`, name, table, events, level, fn)
}

// Init creates the store's schema in the database at url (what `lineagec
// store init` does). It needs a role that may create tables; writing to the
// store afterwards needs only SELECT and INSERT on the two tables.
func Init(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("store: postgres: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return mapErr(err, "connecting", "")
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return createSchema(ctx, conn)
}

// execer is a connection or a pool.
type execer interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

func createSchema(ctx context.Context, db execer) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(schemaLock)); err != nil {
			return err
		}
		for _, stmt := range append(schema[:len(schema):len(schema)], indexSchema...) {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return backfillIndex(ctx, tx)
	})
	if err != nil {
		return mapErr(err, "creating the schema", "")
	}
	return nil
}

// hasSchema reports whether every table exists (a database made before
// lineage_checkpoints gets it at the next Open, or from store init).
func hasSchema(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `SELECT to_regclass('lineage_agents') IS NOT NULL
		AND to_regclass('lineage_records') IS NOT NULL
		AND to_regclass('lineage_checkpoints') IS NOT NULL
		AND to_regclass('lineage_agent_index') IS NOT NULL
		AND to_regclass('lineage_pending') IS NOT NULL`).Scan(&ok)
	if err != nil {
		return false, mapErr(err, "looking for the schema", "")
	}
	return ok, nil
}
