package postgres

import (
	"errors"
	"fmt"
	"testing"

	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/postgres/pgtest"
)

// TestScanFrom: ScanFrom reads a log from a seq on, sees what another pool
// (another node) appended, and says Shared (D133: store capabilities).
func TestScanFrom(t *testing.T) {
	url := pgtest.URL(t)
	a, b := open(t, url), open(t, url)
	if !store.IsShared(a) {
		t.Fatal("the PostgreSQL store does not say it is shared")
	}
	if err := a.Create("agt_x"); err != nil {
		t.Fatal(err)
	}
	for seq := range 5 {
		if err := b.Append("agt_x", uint64(seq), []byte(fmt.Sprintf(`{"n":%d}`, seq))); err != nil {
			t.Fatal(err)
		}
	}
	read := func(from uint64) (seqs []uint64, err error) {
		err = store.ScanFrom(a, "agt_x", from, func(seq uint64, rec []byte) error {
			if want := fmt.Sprintf(`{"n":%d}`, seq); string(rec) != want {
				return fmt.Errorf("seq %d holds %s, want %s", seq, rec, want)
			}
			seqs = append(seqs, seq)
			return nil
		})
		return seqs, err
	}
	for from, want := range map[uint64]string{0: "[0 1 2 3 4]", 3: "[3 4]", 4: "[4]", 5: "[]", 99: "[]"} {
		got, err := read(from)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("ScanFrom(%d) = %v, %v; want %s", from, got, err, want)
		}
	}
	if err := a.ScanFrom("agt_none", 0, func(uint64, []byte) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ScanFrom(0) of no log: %v, want ErrNotFound", err)
	}
}
