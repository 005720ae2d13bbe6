package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lineage-guard/lineage/runtime/store/postgres/pgtest"
)

// TestStoreInit runs `lineagec store init` twice on an empty database: the
// schema is there after the first, the second changes nothing and succeeds.
func TestStoreInit(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"store", "init"}, &stdout, &stderr); code != exitFailure ||
		!strings.Contains(stderr.String(), "--store") {
		t.Errorf("store init without a store: exit %d, %q; want 1 asking for --store", code, stderr.String())
	}
	url := pgtest.URL(t)
	for i := range 2 {
		stdout.Reset()
		stderr.Reset()
		if code := run([]string{"store", "init", "--store", url}, &stdout, &stderr); code != exitOK ||
			!strings.HasPrefix(stdout.String(), "ok: ") {
			t.Fatalf("store init #%d: exit %d, stdout %q, stderr %q", i+1, code, stdout.String(), stderr.String())
		}
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var triggers int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'lineage_%_append_only_%'`).Scan(&triggers); err != nil {
		t.Fatal(err)
	}
	if triggers != 4 {
		t.Errorf("%d append-only triggers after store init, want 4", triggers)
	}
}
