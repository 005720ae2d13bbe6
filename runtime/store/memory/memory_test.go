package store

import "testing"

func TestMemory(t *testing.T) {
	testStore(t, func(*testing.T) Store { return NewMemory() })
}

// TestMemoryAppendAllocs pins the hot path: one allocation per Append (the
// copy of the records), plus the amortized growth of the log's slice.
func TestMemoryAppendAllocs(t *testing.T) {
	m := NewMemory()
	mustCreate(t, m, "agt_a")
	r1, r2 := rec("agt_a", 1), rec("agt_a", 2)
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
