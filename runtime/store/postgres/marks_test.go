package postgres

import (
	"testing"

	"github.com/lineage-guard/lineage/runtime/store"
	"github.com/lineage-guard/lineage/runtime/store/postgres/pgtest"
)

const (
	headA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	headB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// TestMarksShared: the checkpoint mark one node keeps is the one every node
// of the database reads, after a restart too; it only rises, and the table
// refuses an UPDATE that lowers it, a DELETE and a TRUNCATE (D254 (the
// signed size shared by the nodes)).
func TestMarksShared(t *testing.T) {
	url := pgtest.URL(t)
	a, b := open(t, url), open(t, url)
	if m, err := b.LoadMark("agt_a"); err != nil || m != (store.Mark{}) {
		t.Fatalf("LoadMark of an agent never signed: %+v %v", m, err)
	}
	if err := a.StoreMark("agt_a", store.Mark{Size: 6, Head: headA}); err != nil {
		t.Fatal(err)
	}
	if err := b.StoreMark("agt_a", store.Mark{Size: 3, Head: headB}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	c := open(t, url)
	if m, err := c.LoadMark("agt_a"); err != nil || m != (store.Mark{Size: 6, Head: headA}) {
		t.Fatalf("another node's LoadMark: %+v %v, want 6 %s", m, err, headA)
	}
	if err := c.StoreMark("agt_a", store.Mark{Size: 7, Head: headB}); err != nil {
		t.Fatal(err)
	}
	if m, _ := a.LoadMark("agt_a"); m != (store.Mark{Size: 7, Head: headB}) {
		t.Errorf("the first node reads %+v, want the raised mark 7", m)
	}
	for _, sql := range []string{
		`UPDATE lineage_checkpoints SET size = 3 WHERE agent = 'agt_a'`,
		`UPDATE lineage_checkpoints SET head = 'sha256:' || repeat('c', 64) WHERE agent = 'agt_a'`,
		`DELETE FROM lineage_checkpoints`,
		`TRUNCATE lineage_checkpoints`,
	} {
		if err := exec(t, url, sql); err == nil {
			t.Errorf("%s: accepted, want refused", sql)
		}
	}
	if m, _ := a.LoadMark("agt_a"); m.Size != 7 {
		t.Errorf("mark after the refused statements: %+v", m)
	}
}
