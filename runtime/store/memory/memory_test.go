package memory

import (
	"testing"

	"github.com/lineage-guard/lineage/runtime/store/storetest"
)

func TestMemory(t *testing.T) {
	storetest.Run(t, storetest.Default, func(*testing.T) storetest.Store { return New() })
}

// TestMemoryAppendAllocs pins the hot path: one allocation per Append (the
// copy of the records), plus the amortized growth of the log's slice.
func TestMemoryAppendAllocs(t *testing.T) {
	m := New()
	storetest.MustCreate(t, m, "agt_a")
	r1, r2 := storetest.Rec("agt_a", 1), storetest.Rec("agt_a", 2)
	seq := uint64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		if err := m.Append("agt_a", seq, r1, r2); err != nil {
			t.Fatal(err)
		}
		seq += 2
	})
	if allocs > 1 {
		t.Fatalf("%v allocations per Append, want 1", allocs)
	}
}
