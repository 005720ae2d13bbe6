package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Exec runs statements, in order, on the database at url as the role in url,
// failing the test at the first that fails.
func Exec(t testing.TB, url string, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}
